SELECT
  key,
  COUNT(*) AS steps,
  MIN(step) AS first_step,
  MAX(step) AS last_step,
  MIN(value) FILTER(WHERE
    NOT ISNAN(value)) AS min,
  MAX(value) FILTER(WHERE
    NOT ISNAN(value)) AS max
FROM step_metrics
WHERE
  run_id = :run_id
GROUP BY
  key
ORDER BY
  key NULLS LAST

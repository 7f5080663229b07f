SELECT
  step,
  value
FROM step_metrics
WHERE
  run_id = :run_id AND key = :key
ORDER BY
  step NULLS LAST

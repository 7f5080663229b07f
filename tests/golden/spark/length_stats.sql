SELECT
  step,
  n,
  prompt_mean,
  response_mean,
  response_p50,
  response_p90,
  response_p99,
  response_max,
  response_max / NULLIF(response_p50, 0) AS tail_ratio,
  response_std / NULLIF(response_mean, 0) AS cv,
  capped / NULLIF(cap_known, 0) AS cap_ratio
FROM step_lengths
WHERE
  run_id = :run_id
ORDER BY
  step NULLS LAST

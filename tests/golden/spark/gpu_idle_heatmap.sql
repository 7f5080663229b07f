SELECT
  rank,
  step,
  kernel_time_us,
  kernel_time_us - busy_us AS idle_us,
  100 * (
    kernel_time_us - busy_us
  ) / NULLIF(kernel_time_us, 0) AS idle_pct
FROM gpu_step_time
WHERE
  run_id = :run_id AND include_last_step = :include_last_step AND NOT step IS NULL
ORDER BY
  rank NULLS LAST,
  step NULLS LAST

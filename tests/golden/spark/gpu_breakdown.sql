SELECT
  rank,
  kernel_time_us,
  100 * compute_us / NULLIF(kernel_time_us, 0) AS compute_pct,
  100 * (
    busy_us - compute_us
  ) / NULLIF(kernel_time_us, 0) AS non_compute_pct,
  100 * (
    kernel_time_us - busy_us
  ) / NULLIF(kernel_time_us, 0) AS idle_pct
FROM gpu_step_time
WHERE
  run_id = :run_id AND include_last_step = :include_last_step AND step IS NULL
ORDER BY
  rank NULLS LAST

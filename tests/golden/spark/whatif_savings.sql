WITH job AS (
  /* whatif's rule: packed logs name ranks dp_rank * tp, so the stride between ranks is tp. */
  SELECT
    COALESCE(
      :gpus,
      (
        SELECT
          n_gpus
        FROM runs
        WHERE
          run_id = :run_id
      ),
      MAX(rank) + (
        MAX(rank) - MIN(rank)
      ) DIV NULLIF(COUNT(DISTINCT rank) - 1, 0)
    ) AS gpus
  FROM samples
  WHERE
    run_id = :run_id
), totals AS (
  SELECT
    w.policy,
    COUNT(*) AS steps,
    CAST(SUM(w.predicted_s) AS DOUBLE) AS rollout_s,
    CAST(SUM(b.predicted_s) AS DOUBLE) AS recorded_s
  FROM whatif AS w
  JOIN whatif AS b
    ON b.run_id = w.run_id
    AND b.step = w.step
    AND b.policy = 'as-recorded'
    AND b.engine IS NULL
  WHERE
    w.run_id = :run_id AND w.engine IS NULL
  GROUP BY
    w.policy
)
SELECT
  t.policy,
  CASE
    WHEN t.policy = 'length-balanced'
    THEN 'length-balanced (oracle bound)'
    ELSE t.policy
  END AS dispatch,
  t.steps,
  t.rollout_s,
  t.recorded_s - t.rollout_s AS saved_s,
  1 - t.rollout_s / NULLIF(t.recorded_s, 0) AS saved_frac,
  t.recorded_s / NULLIF(t.rollout_s, 0) AS speedup,
  CAST(j.gpus AS INT) AS gpus,
  (
    t.recorded_s - t.rollout_s
  ) * j.gpus / 3600.0 AS run_gpu_hours_saved
FROM totals AS t, job AS j
ORDER BY
  run_gpu_hours_saved DESC,
  t.policy NULLS LAST

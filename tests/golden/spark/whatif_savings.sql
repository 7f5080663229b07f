WITH job AS (
  /* whatif's rule: the gpus parameter, the run's n_gpus, else run_ranks.gpus_from_ranks */
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
      (
        SELECT
          gpus_from_ranks
        FROM run_ranks
        WHERE
          run_id = :run_id
      )
    ) AS gpus
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

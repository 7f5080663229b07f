WITH job AS (
  /* the gpus parameter, the run's n_gpus, else the GPU count its ranks imply (run_ranks) */
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
), steps AS (
  SELECT
    w.step,
    w.policy,
    w.predicted_s,
    w.idle_frac,
    w.speedup,
    b.predicted_s - w.predicted_s AS saved_s
  FROM whatif AS w
  JOIN whatif AS b
    ON b.run_id = w.run_id
    AND b.step = w.step
    AND b.policy = 'as-recorded'
    AND b.engine IS NULL
  WHERE
    w.run_id = :run_id AND w.engine IS NULL
)
SELECT
  s.step,
  s.policy,
  s.predicted_s,
  s.idle_frac AS rollout_idle_frac,
  s.speedup,
  s.saved_s,
  CAST(j.gpus AS INT) AS gpus,
  s.saved_s * j.gpus / 3600.0 AS gpu_hours_saved,
  CAST(SUM(s.saved_s) OVER (PARTITION BY s.policy) AS DOUBLE) * j.gpus / 3600.0 AS run_gpu_hours_saved,
  CASE
    WHEN s.policy = 'length-balanced'
    THEN 'length-balanced (oracle bound)'
    ELSE s.policy
  END AS dispatch
FROM steps AS s, job AS j
ORDER BY
  s.step NULLS LAST,
  s.policy NULLS LAST

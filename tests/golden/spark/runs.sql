SELECT
  r.run_id,
  r.name,
  r.format,
  r.framework,
  r.model,
  r.task,
  (
    SELECT
      COUNT(*)
    FROM (
      SELECT
        step
      FROM step_lengths AS s
      WHERE
        s.run_id = r.run_id
      UNION
      SELECT
        step
      FROM step_metrics AS m
      WHERE
        m.run_id = r.run_id
      UNION
      SELECT
        step
      FROM rank_stage AS k
      WHERE
        k.run_id = r.run_id
      UNION
      SELECT
        step
      FROM profiler_steps AS p
      WHERE
        p.run_id = r.run_id
    )
  ) AS steps,
  (
    SELECT
      COALESCE(CAST(SUM(s.n) AS BIGINT), 0)
    FROM step_lengths AS s
    WHERE
      s.run_id = r.run_id
  ) AS samples,
  r.created_at
FROM runs AS r
ORDER BY
  r.created_at DESC,
  r.run_id NULLS LAST

WITH ranks AS (
  SELECT
    step,
    dp_rank,
    n,
    response_tokens AS tokens,
    max_len,
    gen_s
  FROM step_rank_lengths
  WHERE
    run_id = :run_id AND NOT dp_rank IS NULL
), steps AS (
  SELECT
    step,
    COUNT(gen_s) = COUNT(*) AS timed,
    COUNT(*) AS engines,
    MAX(max_len) AS longest,
    CAST(SUM(max_len) AS DOUBLE) AS sum_len,
    MAX(gen_s) AS slowest,
    CAST(SUM(gen_s) AS DOUBLE) AS sum_s
  FROM ranks
  GROUP BY
    step
)
SELECT
  r.step,
  r.dp_rank,
  r.n,
  r.tokens,
  r.max_len,
  r.gen_s,
  CASE WHEN s.timed THEN 'seconds' ELSE 'tokens' END AS basis,
  CASE
    WHEN s.timed
    THEN 1 - r.gen_s / NULLIF(s.slowest, 0)
    ELSE 1 - r.max_len / NULLIF(s.longest, 0)
  END AS idle_frac,
  r.tokens / NULLIF(r.n * r.max_len, 0) AS slot_util,
  CASE
    WHEN s.timed
    THEN 1 - s.sum_s / NULLIF(s.engines * s.slowest, 0)
    ELSE 1 - s.sum_len / NULLIF(s.engines * s.longest, 0)
  END AS rollout_idle_frac
FROM ranks AS r
JOIN steps AS s
  USING (step)
ORDER BY
  r.step NULLS LAST,
  r.dp_rank NULLS LAST

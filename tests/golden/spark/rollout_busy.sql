WITH ranks AS (
  SELECT
    step,
    dp_rank,
    max_len,
    gen_s
  FROM step_rank_lengths
  WHERE
    run_id = :run_id AND NOT dp_rank IS NULL
), steps AS (
  SELECT
    step,
    COUNT(gen_s) = COUNT(*) AS timed,
    MAX(max_len) AS longest,
    MAX(gen_s) AS slowest
  FROM ranks
  GROUP BY
    step
), busy AS (
  SELECT
    r.step,
    r.dp_rank,
    CASE WHEN s.timed THEN 'seconds' ELSE 'tokens' END AS basis,
    CAST(CASE WHEN s.timed THEN r.gen_s ELSE r.max_len END AS DOUBLE) AS busy,
    CAST(CASE WHEN s.timed THEN s.slowest ELSE s.longest END AS DOUBLE) AS top
  FROM ranks AS r
  JOIN steps AS s
    USING (step)
)
SELECT
  step,
  dp_rank,
  basis,
  busy,
  top - busy AS idle,
  1 - busy / NULLIF(top, 0) AS idle_frac
FROM busy
ORDER BY
  step NULLS LAST,
  dp_rank NULLS LAST

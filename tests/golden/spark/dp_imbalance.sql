WITH ranks AS (
  SELECT
    step,
    dp_rank,
    COALESCE(prompt_tokens, 0) + COALESCE(response_tokens, 0) AS tokens
  FROM step_rank_lengths
  WHERE
    run_id = :run_id AND NOT dp_rank IS NULL
), from_samples AS (
  SELECT
    step,
    COUNT(*) AS ranks,
    CAST(MAX(tokens) AS DOUBLE) AS max_tokens,
    AVG(tokens) AS mean_tokens,
    GET(
      TRANSFORM(
        ARRAY_SORT(
          COLLECT_LIST(STRUCT(tokens AS k0, dp_rank AS k1, dp_rank AS v)),
          (l, r) -> CASE
            WHEN l.k0 IS NULL AND r.k0 IS NULL
            THEN 0
            WHEN l.k0 IS NULL
            THEN 1
            WHEN r.k0 IS NULL
            THEN -1
            WHEN l.k0 < r.k0
            THEN 1
            WHEN l.k0 > r.k0
            THEN -1
            ELSE CASE
              WHEN l.k1 IS NULL AND r.k1 IS NULL
              THEN 0
              WHEN l.k1 IS NULL
              THEN 1
              WHEN r.k1 IS NULL
              THEN -1
              WHEN l.k1 < r.k1
              THEN -1
              WHEN l.k1 > r.k1
              THEN 1
              ELSE 0
            END
          END
        ),
        s -> s.v
      ),
      0
    ) AS straggler_rank,
    'samples' AS source
  FROM ranks
  GROUP BY
    step
), from_metrics AS (
  SELECT
    step,
    CAST(NULL AS BIGINT) AS ranks,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/max') AS max_tokens,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/mean') AS mean_tokens,
    CAST(NULL AS INT) AS straggler_rank,
    'global_seqlen' AS source
  FROM step_metrics
  WHERE
    run_id = :run_id
    AND key IN ('global_seqlen/max', 'global_seqlen/mean')
    AND NOT step IN (
      SELECT
        step
      FROM ranks
    )
  GROUP BY
    step
), steps AS (
  SELECT
    *
  FROM from_samples
  UNION ALL
  SELECT
    *
  FROM from_metrics
)
SELECT
  step,
  ranks,
  max_tokens,
  mean_tokens,
  max_tokens / NULLIF(mean_tokens, 0) AS imbalance,
  straggler_rank,
  source
FROM steps
ORDER BY
  step NULLS LAST

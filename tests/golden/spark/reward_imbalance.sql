WITH reward AS (
  SELECT
    k.step,
    k.rank,
    k.seconds,
    COALESCE(k.tokens, l.response_tokens) AS tokens
  FROM rank_stage AS k
  LEFT JOIN step_rank_lengths AS l
    ON l.run_id = k.run_id AND l.step = k.step AND l.dp_rank = k.dp_rank
  WHERE
    k.run_id = :run_id AND k.stage = 'reward'
)
SELECT
  step,
  COUNT(*) AS ranks,
  MAX(seconds) AS max_s,
  AVG(seconds) AS mean_s,
  MAX(seconds) / NULLIF(AVG(seconds), 0) AS imbalance,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(seconds AS k0, rank AS k1, rank AS v)),
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
  ) AS slowest_rank,
  COALESCE(
    CORR(seconds, tokens),
    CASE
      WHEN COUNT(CASE WHEN NOT seconds IS NULL AND NOT tokens IS NULL THEN 1 END) > 0
      THEN CAST('NaN' AS DOUBLE)
    END
  ) AS tokens_corr
FROM reward
GROUP BY
  step
ORDER BY
  step NULLS LAST

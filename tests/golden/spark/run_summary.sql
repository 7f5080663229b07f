WITH steps AS (
  SELECT
    step
  FROM step_lengths
  WHERE
    run_id = :run_id
  UNION
  SELECT
    step
  FROM step_metrics
  WHERE
    run_id = :run_id
  UNION
  SELECT
    step
  FROM rank_stage
  WHERE
    run_id = :run_id
), rollout AS (
  /* rollout_tail's rollout_idle_frac */
  SELECT
    step,
    CASE
      WHEN COUNT(gen_s) = COUNT(*)
      THEN 1 - CAST(SUM(gen_s) AS DOUBLE) / NULLIF(COUNT(*) * MAX(gen_s), 0)
      ELSE 1 - CAST(SUM(max_len) AS DOUBLE) / NULLIF(COUNT(*) * MAX(max_len), 0)
    END AS idle
  FROM step_rank_lengths
  WHERE
    run_id = :run_id AND NOT dp_rank IS NULL
  GROUP BY
    step
), dp AS (
  /* dp_imbalance: samples first, verl's global_seqlen for steps without samples */
  SELECT
    step,
    MAX(tokens) / NULLIF(AVG(tokens), 0) AS imbalance,
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
    ) AS straggler_rank
  FROM (
    SELECT
      step,
      dp_rank,
      COALESCE(prompt_tokens, 0) + COALESCE(response_tokens, 0) AS tokens
    FROM step_rank_lengths
    WHERE
      run_id = :run_id AND NOT dp_rank IS NULL
  )
  GROUP BY
    step
  UNION ALL
  SELECT
    step,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/max') / NULLIF(MAX(value) FILTER(WHERE
      key = 'global_seqlen/mean'), 0) AS imbalance,
    CAST(NULL AS INT) AS straggler_rank
  FROM step_metrics
  WHERE
    run_id = :run_id
    AND key IN ('global_seqlen/max', 'global_seqlen/mean')
    AND NOT step IN (
      SELECT
        step
      FROM step_rank_lengths
      WHERE
        run_id = :run_id AND NOT dp_rank IS NULL
    )
  GROUP BY
    step
), reward AS (
  /* reward_imbalance's imbalance */
  SELECT
    step,
    MAX(seconds) / NULLIF(AVG(seconds), 0) AS imbalance
  FROM rank_stage
  WHERE
    run_id = :run_id AND stage = 'reward'
  GROUP BY
    step
), per_step AS (
  SELECT
    s.step,
    l.n,
    l.response_max / NULLIF(l.response_p50, 0) AS tail_ratio,
    l.capped,
    l.cap_known,
    CASE WHEN l.filtered THEN l.response_tokens END AS filtered_tokens,
    CASE WHEN l.filtered THEN l.response_tokens - l.used_tokens END AS wasted_tokens,
    r.idle,
    d.imbalance AS dp_imbalance,
    d.straggler_rank,
    w.imbalance AS reward_imbalance,
    t.cached_tokens,
    t.cache_prompt_tokens,
    CASE WHEN NOT m.step_s IS NULL THEN m.gen_s END AS gen_s, /* share of step in gen counts steps that log both times */
    CASE WHEN NOT m.gen_s IS NULL THEN m.step_s END AS step_s
  FROM steps AS s
  LEFT JOIN step_lengths AS l
    ON l.run_id = :run_id AND l.step = s.step
  LEFT JOIN rollout AS r
    ON r.step = s.step
  LEFT JOIN dp AS d
    ON d.step = s.step
  LEFT JOIN reward AS w
    ON w.step = s.step
  LEFT JOIN step_turns AS t
    ON t.run_id = :run_id AND t.step = s.step
  LEFT JOIN step_timings AS m
    ON m.run_id = :run_id AND m.step = s.step
)
SELECT
  CAST(:run_id AS STRING) AS run_id,
  COUNT(*) AS steps,
  COALESCE(CAST(SUM(n) AS BIGINT), 0) AS samples,
  AVG(idle) AS rollout_idle_frac_mean,
  MAX(idle) AS rollout_idle_frac_worst,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(idle AS k0, step AS k1, step AS v)) FILTER(WHERE
          NOT idle IS NULL),
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
  ) AS worst_idle_step,
  MAX(tail_ratio) AS tail_ratio_worst,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(tail_ratio AS k0, step AS k1, step AS v)) FILTER(WHERE
          NOT tail_ratio IS NULL),
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
  ) AS worst_tail_step,
  CAST(SUM(capped) AS DOUBLE) / NULLIF(CAST(SUM(cap_known) AS DOUBLE), 0) AS cap_ratio,
  AVG(dp_imbalance) AS dp_imbalance_mean,
  MAX(dp_imbalance) AS dp_imbalance_max,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(dp_imbalance AS k0, step AS k1, step AS v)) FILTER(WHERE
          NOT dp_imbalance IS NULL),
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
  ) AS straggler_step,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(dp_imbalance AS k0, step AS k1, straggler_rank AS v)) FILTER(WHERE
          NOT dp_imbalance IS NULL),
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
  AVG(reward_imbalance) AS reward_imbalance_mean,
  CAST(SUM(wasted_tokens) AS DOUBLE) / NULLIF(CAST(SUM(filtered_tokens) AS DOUBLE), 0) AS wasted_token_frac,
  CAST(SUM(cached_tokens) AS DOUBLE) / NULLIF(CAST(SUM(cache_prompt_tokens) AS DOUBLE), 0) AS prefix_cache_hit,
  CAST(SUM(gen_s) AS DOUBLE) / NULLIF(CAST(SUM(step_s) AS DOUBLE), 0) AS gen_share
FROM per_step
HAVING
  (
    SELECT
      COUNT(*)
    FROM runs
    WHERE
      run_id = :run_id
  ) > 0

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
  UNION
  SELECT
    step
  FROM profiler_steps
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
), verl AS (
  /* rollout_tail_verl's slowest_share and response_clip_ratio */
  SELECT
    step,
    COALESCE(
      MAX(value) FILTER(WHERE
        key = 'timing_s/agent_loop/slowest/generate_sequences'),
      MAX(value) FILTER(WHERE
        key = 'timing_s/generation_timing/max')
    ) / NULLIF(MAX(value) FILTER(WHERE
      key = 'timing_s/gen'), 0) AS slowest_share,
    MAX(value) FILTER(WHERE
      key = 'response_length/clip_ratio') AS clip_ratio
  FROM step_metrics
  WHERE
    run_id = :run_id
    AND key IN (
      'timing_s/agent_loop/slowest/generate_sequences',
      'timing_s/generation_timing/max',
      'timing_s/gen',
      'response_length/clip_ratio'
    )
  GROUP BY
    step
), gpu AS (
  /* gpu_time's whole-trace rows (step NULL), HTA's default */
  SELECT
    rank,
    (
      kernel_time_us - busy_us
    ) / NULLIF(kernel_time_us, 0) AS idle,
    compute_us / NULLIF(kernel_time_us, 0) AS compute
  FROM gpu_step_time
  WHERE
    run_id = :run_id AND step IS NULL AND NOT include_last_step
), gpu_summary AS (
  SELECT
    AVG(idle) AS idle_mean,
    CASE WHEN COUNT(idle) > 1 THEN MAX(idle) END AS idle_worst, /* a worst rank only means something next to other ranks */
    CASE
      WHEN COUNT(idle) > 1
      THEN GET(
        TRANSFORM(
          ARRAY_SORT(
            COLLECT_LIST(STRUCT(idle AS k0, rank AS k1, rank AS v)) FILTER(WHERE
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
      )
    END AS idle_rank,
    AVG(compute) AS compute_mean
  FROM gpu
), job AS (
  /* whatif's GPU count: the run's n_gpus, else run_ranks.gpus_from_ranks */
  SELECT
    COALESCE(
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
), policies AS (
  /* whatif_savings per policy */
  SELECT
    w.policy,
    CAST(SUM(b.predicted_s - w.predicted_s) AS DOUBLE) AS saved_s,
    CAST(SUM(b.predicted_s - w.predicted_s) AS DOUBLE) / NULLIF(CAST(SUM(b.predicted_s) AS DOUBLE), 0) AS saved_frac
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
), whatif_summary AS (
  SELECT
    GET(
      TRANSFORM(
        ARRAY_SORT(
          COLLECT_LIST(STRUCT(p.saved_s AS k0, p.policy AS k1, p.policy AS v)) FILTER(WHERE
            NOT p.policy IN ('as-recorded', 'length-balanced')),
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
    ) AS best_policy,
    MAX(p.saved_s) FILTER(WHERE
      NOT p.policy IN ('as-recorded', 'length-balanced')) * MAX(j.gpus) / 3600.0 AS best_gpu_hours,
    GET(
      TRANSFORM(
        ARRAY_SORT(
          COLLECT_LIST(STRUCT(p.saved_s AS k0, p.policy AS k1, p.saved_frac AS v)) FILTER(WHERE
            NOT p.policy IN ('as-recorded', 'length-balanced')),
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
    ) AS best_saved_frac,
    CAST(MAX(j.gpus) AS INT) AS gpus,
    MAX(p.saved_s) FILTER(WHERE
      p.policy = 'length-balanced') * MAX(j.gpus) / 3600.0 AS oracle_gpu_hours
  FROM policies AS p, job AS j
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
    CASE WHEN NOT m.gen_s IS NULL THEN m.step_s END AS step_s,
    m.step_s AS any_step_s,
    v.slowest_share,
    v.clip_ratio
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
  LEFT JOIN verl AS v
    ON v.step = s.step
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
  COALESCE(
    CAST(SUM(capped) AS DOUBLE) / NULLIF(CAST(SUM(cap_known) AS DOUBLE), 0),
    AVG(clip_ratio) FILTER(WHERE
      n IS NULL)
  ) AS cap_ratio,
  (
    SELECT
      max_response_len
    FROM runs
    WHERE
      run_id = :run_id
  ) AS max_response_len,
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
  CAST(SUM(gen_s) AS DOUBLE) / NULLIF(CAST(SUM(step_s) AS DOUBLE), 0) AS gen_share,
  AVG(any_step_s) AS mean_step_s,
  AVG(slowest_share) AS slowest_gen_share,
  (
    SELECT
      idle_mean
    FROM gpu_summary
  ) AS gpu_idle_frac_mean,
  (
    SELECT
      idle_worst
    FROM gpu_summary
  ) AS gpu_idle_frac_worst,
  (
    SELECT
      idle_rank
    FROM gpu_summary
  ) AS gpu_idle_rank,
  (
    SELECT
      compute_mean
    FROM gpu_summary
  ) AS gpu_compute_frac_mean,
  (
    SELECT
      best_policy
    FROM whatif_summary
  ) AS whatif_best_policy,
  (
    SELECT
      best_gpu_hours
    FROM whatif_summary
  ) AS whatif_best_gpu_hours,
  (
    SELECT
      best_saved_frac
    FROM whatif_summary
  ) AS whatif_best_saved_frac,
  (
    SELECT
      gpus
    FROM whatif_summary
  ) AS whatif_gpus,
  (
    SELECT
      oracle_gpu_hours
    FROM whatif_summary
  ) AS whatif_oracle_gpu_hours
FROM per_step
HAVING
  (
    SELECT
      COUNT(*)
    FROM runs
    WHERE
      run_id = :run_id
  ) > 0

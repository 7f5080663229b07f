-- name: run_summary
-- title: Headline findings
-- section: Runs
-- One row of headline numbers for a run, each computed as the per-step query named in its
-- column defines it: how idle the rollout engines sat, how long the length tail is, how
-- uneven the ranks are and how much generation was thrown away. NULL where the run lacks
-- the data.
-- @param run_id VARCHAR  Run to summarise.
-- @column run_id VARCHAR  The run.
-- @column steps BIGINT  Steps with samples, step metrics, rank stage timings or profiler (ProfilerStep) windows.
-- @column samples BIGINT  Responses in the run.
-- @column rollout_idle_frac_mean DOUBLE  Mean over steps of rollout_tail's rollout_idle_frac. Sentence: Rollout engines sat idle {rollout_idle_frac_mean} of each rollout on average waiting for the slowest engine, {rollout_idle_frac_worst} in the worst one (step {worst_idle_step}).
-- @column rollout_idle_frac_worst DOUBLE  Largest rollout_idle_frac of any step.
-- @column worst_idle_step INTEGER  Step with the largest rollout_idle_frac (earliest on a tie).
-- @column tail_ratio_worst DOUBLE  Largest length_stats tail_ratio (max / median response length) of any step. Sentence: The longest response was {tail_ratio_worst} the median one in step {worst_tail_step}.
-- @column worst_tail_step INTEGER  Step with the largest tail_ratio (earliest on a tie).
-- @column cap_ratio DOUBLE  Share of all responses truncated or at the response cap; without samples, the mean of verl's response_length/clip_ratio over steps. Sentence: {cap_ratio} of responses hit the length cap ({max_response_len} tokens) and were cut short.
-- @column max_response_len INTEGER  The run's response-length cap (tokens), when known.
-- @column dp_imbalance_mean DOUBLE  Mean over steps of dp_imbalance's imbalance (max / mean tokens per DP rank).
-- @column dp_imbalance_max DOUBLE  Largest dp_imbalance imbalance of any step. Sentence: The busiest DP rank carried {dp_imbalance_max} the mean rank's tokens in step {straggler_step}, {dp_imbalance_mean} on average.
-- @column straggler_step INTEGER  Step with the largest dp imbalance (earliest on a tie).
-- @column straggler_rank INTEGER  The busiest dp_rank in that step; NULL from verl metrics.
-- @column reward_imbalance_mean DOUBLE  Mean over steps of reward_imbalance's imbalance (slowest / mean reward time). Sentence: The slowest rank's reward took {reward_imbalance_mean} the mean rank's on average.
-- @column wasted_token_frac DOUBLE  Response tokens never trained on over all response tokens, in steps with filter information. Sentence: {wasted_token_frac} of generated response tokens were filtered away and never trained on.
-- @column prefix_cache_hit DOUBLE  Cached over prompt tokens over all turns whose cached_tokens is known. Sentence: The prefix cache served {prefix_cache_hit} of multi-turn prompt tokens.
-- @column gen_share DOUBLE  sum(timing_s/gen) / sum(timing_s/step) over steps that log both. Sentence: Rollout generation took {gen_share} of step time (a step took {mean_step_s} on average).
-- @column mean_step_s DOUBLE  Mean timing_s/step over the steps that log it (s).
-- @column slowest_gen_share DOUBLE  Mean over steps of rollout_tail_verl's slowest_share: the slowest generation over the whole gen stage. Sentence: The slowest generation alone took {slowest_gen_share} of the gen stage on average: the rollout waits on its long tail.
-- @column gpu_idle_frac_mean DOUBLE  Mean over ranks of gpu_time's whole-trace idle share (idle_us / kernel_time_us, HTA's default without the last step). Sentence: GPUs sat idle {gpu_idle_frac_mean} of their profiled time on average (worst: rank {gpu_idle_rank}, {gpu_idle_frac_worst}).
-- @column gpu_idle_frac_worst DOUBLE  Largest whole-trace idle share of any rank; NULL with a single rank.
-- @column gpu_idle_rank INTEGER  Rank with that idle share (lowest on a tie); NULL with a single rank.
-- @column gpu_compute_frac_mean DOUBLE  Mean over ranks of gpu_time's whole-trace compute share (compute_us / kernel_time_us). Sentence: Compute kernels ran {gpu_compute_frac_mean} of the profiled GPU time; the rest went to communication, memory copies and idling.
-- @column whatif_best_policy VARCHAR  From a stored simulation (whatif_savings): the realizable policy (not as-recorded, not the length-balanced oracle) that saves the most GPU-hours over the run. Sentence: Dispatching by {whatif_best_policy} would save {whatif_best_gpu_hours} over the run, {whatif_best_saved_frac} of rollout time on {whatif_gpus} GPUs (the length-balanced oracle bound: {whatif_oracle_gpu_hours}).
-- @column whatif_best_gpu_hours DOUBLE  GPU-hours that policy saves over the run (whatif_savings' run_gpu_hours_saved).
-- @column whatif_best_saved_frac DOUBLE  Share of the as-recorded rollout time it saves.
-- @column whatif_gpus INTEGER  GPUs the savings count (as in whatif).
-- @column whatif_oracle_gpu_hours DOUBLE  GPU-hours the length-balanced oracle bound saves over the run.
-- @chart table title="Headline findings"
WITH steps AS (
    SELECT step FROM step_lengths WHERE run_id = $run_id
    UNION SELECT step FROM step_metrics WHERE run_id = $run_id
    UNION SELECT step FROM rank_stage WHERE run_id = $run_id
    UNION SELECT step FROM profiler_steps WHERE run_id = $run_id),
rollout AS (
    -- rollout_tail's rollout_idle_frac
    SELECT
        step,
        CASE WHEN count(gen_s) = count(*)
             THEN 1 - sum(gen_s)::DOUBLE / NULLIF(count(*) * max(gen_s), 0)
             ELSE 1 - sum(max_len)::DOUBLE / NULLIF(count(*) * max(max_len), 0)
        END AS idle
    FROM step_rank_lengths
    WHERE run_id = $run_id AND dp_rank IS NOT NULL
    GROUP BY step),
dp AS (
    -- dp_imbalance: samples first, verl's global_seqlen for steps without samples
    SELECT
        step,
        max(tokens) / NULLIF(avg(tokens), 0) AS imbalance,
        first(dp_rank ORDER BY tokens DESC, dp_rank) AS straggler_rank
    FROM (SELECT step, dp_rank, coalesce(prompt_tokens, 0) + coalesce(response_tokens, 0) AS tokens
          FROM step_rank_lengths
          WHERE run_id = $run_id AND dp_rank IS NOT NULL)
    GROUP BY step
    UNION ALL
    SELECT
        step,
        max(value) FILTER (WHERE key = 'global_seqlen/max')
            / NULLIF(max(value) FILTER (WHERE key = 'global_seqlen/mean'), 0) AS imbalance,
        NULL::INTEGER AS straggler_rank
    FROM step_metrics
    WHERE run_id = $run_id
      AND key IN ('global_seqlen/max', 'global_seqlen/mean')
      AND step NOT IN (SELECT step FROM step_rank_lengths
                       WHERE run_id = $run_id AND dp_rank IS NOT NULL)
    GROUP BY step),
verl AS (
    -- rollout_tail_verl's slowest_share and response_clip_ratio
    SELECT
        step,
        coalesce(max(value) FILTER (WHERE key = 'timing_s/agent_loop/slowest/generate_sequences'),
                 max(value) FILTER (WHERE key = 'timing_s/generation_timing/max'))
            / NULLIF(max(value) FILTER (WHERE key = 'timing_s/gen'), 0) AS slowest_share,
        max(value) FILTER (WHERE key = 'response_length/clip_ratio') AS clip_ratio
    FROM step_metrics
    WHERE run_id = $run_id
      AND key IN ('timing_s/agent_loop/slowest/generate_sequences', 'timing_s/generation_timing/max',
                  'timing_s/gen', 'response_length/clip_ratio')
    GROUP BY step),
gpu AS (
    -- gpu_time's whole-trace rows (step NULL), HTA's default
    SELECT
        rank,
        (kernel_time_us - busy_us) / NULLIF(kernel_time_us, 0) AS idle,
        compute_us / NULLIF(kernel_time_us, 0) AS compute
    FROM gpu_step_time
    WHERE run_id = $run_id AND step IS NULL AND NOT include_last_step),
gpu_summary AS (
    SELECT
        avg(idle) AS idle_mean,
        -- a worst rank only means something next to other ranks
        CASE WHEN count(idle) > 1 THEN max(idle) END AS idle_worst,
        CASE WHEN count(idle) > 1
             THEN first(rank ORDER BY idle DESC, rank) FILTER (WHERE idle IS NOT NULL) END AS idle_rank,
        avg(compute) AS compute_mean
    FROM gpu),
job AS (
    -- whatif's GPU count: the run's n_gpus, else run_ranks.gpus_from_ranks
    SELECT coalesce((SELECT n_gpus FROM runs WHERE run_id = $run_id),
                    (SELECT gpus_from_ranks FROM run_ranks WHERE run_id = $run_id)) AS gpus),
policies AS (
    -- whatif_savings per policy
    SELECT
        w.policy,
        sum(b.predicted_s - w.predicted_s)::DOUBLE AS saved_s,
        sum(b.predicted_s - w.predicted_s)::DOUBLE / NULLIF(sum(b.predicted_s)::DOUBLE, 0) AS saved_frac
    FROM whatif w
    JOIN whatif b ON b.run_id = w.run_id AND b.step = w.step AND b.policy = 'as-recorded'
        AND b.engine IS NULL
    WHERE w.run_id = $run_id AND w.engine IS NULL
    GROUP BY w.policy),
whatif_summary AS (
    SELECT
        first(p.policy ORDER BY p.saved_s DESC, p.policy)
            FILTER (WHERE p.policy NOT IN ('as-recorded', 'length-balanced')) AS best_policy,
        max(p.saved_s) FILTER (WHERE p.policy NOT IN ('as-recorded', 'length-balanced'))
            * max(j.gpus) / 3600.0 AS best_gpu_hours,
        first(p.saved_frac ORDER BY p.saved_s DESC, p.policy)
            FILTER (WHERE p.policy NOT IN ('as-recorded', 'length-balanced')) AS best_saved_frac,
        max(j.gpus)::INTEGER AS gpus,
        max(p.saved_s) FILTER (WHERE p.policy = 'length-balanced') * max(j.gpus) / 3600.0 AS oracle_gpu_hours
    FROM policies p, job j),
reward AS (
    -- reward_imbalance's imbalance
    SELECT step, max(seconds) / NULLIF(avg(seconds), 0) AS imbalance
    FROM rank_stage
    WHERE run_id = $run_id AND stage = 'reward'
    GROUP BY step),
per_step AS (
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
        -- share of step in gen counts steps that log both times
        CASE WHEN m.step_s IS NOT NULL THEN m.gen_s END AS gen_s,
        CASE WHEN m.gen_s IS NOT NULL THEN m.step_s END AS step_s,
        m.step_s AS any_step_s,
        v.slowest_share,
        v.clip_ratio
    FROM steps s
    LEFT JOIN step_lengths l ON l.run_id = $run_id AND l.step = s.step
    LEFT JOIN rollout r ON r.step = s.step
    LEFT JOIN dp d ON d.step = s.step
    LEFT JOIN reward w ON w.step = s.step
    LEFT JOIN step_turns t ON t.run_id = $run_id AND t.step = s.step
    LEFT JOIN step_timings m ON m.run_id = $run_id AND m.step = s.step
    LEFT JOIN verl v ON v.step = s.step)
SELECT
    $run_id::VARCHAR AS run_id,
    count(*) AS steps,
    coalesce(sum(n)::BIGINT, 0) AS samples,
    avg(idle) AS rollout_idle_frac_mean,
    max(idle) AS rollout_idle_frac_worst,
    first(step ORDER BY idle DESC, step) FILTER (WHERE idle IS NOT NULL) AS worst_idle_step,
    max(tail_ratio) AS tail_ratio_worst,
    first(step ORDER BY tail_ratio DESC, step) FILTER (WHERE tail_ratio IS NOT NULL)
        AS worst_tail_step,
    coalesce(sum(capped)::DOUBLE / NULLIF(sum(cap_known)::DOUBLE, 0),
             avg(clip_ratio) FILTER (WHERE n IS NULL)) AS cap_ratio,
    (SELECT max_response_len FROM runs WHERE run_id = $run_id) AS max_response_len,
    avg(dp_imbalance) AS dp_imbalance_mean,
    max(dp_imbalance) AS dp_imbalance_max,
    first(step ORDER BY dp_imbalance DESC, step) FILTER (WHERE dp_imbalance IS NOT NULL)
        AS straggler_step,
    first(straggler_rank ORDER BY dp_imbalance DESC, step) FILTER (WHERE dp_imbalance IS NOT NULL)
        AS straggler_rank,
    avg(reward_imbalance) AS reward_imbalance_mean,
    sum(wasted_tokens)::DOUBLE / NULLIF(sum(filtered_tokens)::DOUBLE, 0) AS wasted_token_frac,
    sum(cached_tokens)::DOUBLE / NULLIF(sum(cache_prompt_tokens)::DOUBLE, 0) AS prefix_cache_hit,
    sum(gen_s)::DOUBLE / NULLIF(sum(step_s)::DOUBLE, 0) AS gen_share,
    avg(any_step_s) AS mean_step_s,
    avg(slowest_share) AS slowest_gen_share,
    (SELECT idle_mean FROM gpu_summary) AS gpu_idle_frac_mean,
    (SELECT idle_worst FROM gpu_summary) AS gpu_idle_frac_worst,
    (SELECT idle_rank FROM gpu_summary) AS gpu_idle_rank,
    (SELECT compute_mean FROM gpu_summary) AS gpu_compute_frac_mean,
    (SELECT best_policy FROM whatif_summary) AS whatif_best_policy,
    (SELECT best_gpu_hours FROM whatif_summary) AS whatif_best_gpu_hours,
    (SELECT best_saved_frac FROM whatif_summary) AS whatif_best_saved_frac,
    (SELECT gpus FROM whatif_summary) AS whatif_gpus,
    (SELECT oracle_gpu_hours FROM whatif_summary) AS whatif_oracle_gpu_hours
FROM per_step
HAVING (SELECT count(*) FROM runs WHERE run_id = $run_id) > 0

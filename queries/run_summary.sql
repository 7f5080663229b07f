-- name: run_summary
-- title: Headline findings
-- section: Runs
-- stored: yes
-- One row of headline numbers for a run, each computed as the per-step query named in its
-- column defines it: how idle the rollout engines sat, how long the length tail is, how
-- uneven the ranks are and how much generation was thrown away. NULL where the run lacks
-- the data.
-- @param run_id VARCHAR  Run to summarise.
-- @column run_id VARCHAR  The run.
-- @column steps BIGINT fmt=count  Steps with any data; samples, step metrics, rank stage timings or profiler (ProfilerStep) windows.
-- @column samples BIGINT fmt=count  Responses in the run; NULL when it has no per-sample rows (a verl log, W&B metrics or a profiler trace count steps, not responses).
-- @column rollout_idle_frac_mean DOUBLE fmt=pct  Mean over steps of rollout_tail's rollout_idle_frac. Sentence: Rollout engines sat idle {rollout_idle_frac_mean} of each rollout on average waiting for the slowest engine, {rollout_idle_frac_worst} in the worst one (step {worst_idle_step}).
-- @column rollout_idle_frac_worst DOUBLE fmt=pct  Rollout idle in the worst step; the largest rollout_idle_frac of any step.
-- @column worst_idle_step INTEGER fmt=count  The step with the most rollout idle; the largest rollout_idle_frac, earliest on a tie.
-- @column tail_ratio_worst DOUBLE fmt=x  Largest length_stats tail_ratio (max / median response length) of any step. Sentence: The longest response was {tail_ratio_worst} the median one in step {worst_tail_step}.
-- @column worst_tail_step INTEGER fmt=count  The step with the longest tail; the largest tail_ratio, earliest on a tie.
-- @column cap_ratio DOUBLE fmt=pct  Share of all responses truncated or at the response cap; without samples, the mean of verl's response_length/clip_ratio over steps. Sentence: {cap_ratio} of responses over the whole run hit the length cap ({max_response_len} tokens) and were cut short.
-- @column max_response_len INTEGER fmt=tokens  The run's response-length cap (tokens), when known.
-- @column gpus BIGINT fmt=count  GPUs in the job; the run's n_gpus, else the count its logged ranks imply (whatif_job).
-- @column dp_imbalance_mean DOUBLE fmt=x  The busiest DP rank's tokens against the mean rank's, on average over steps; dp_imbalance's imbalance (max / mean tokens per DP rank).
-- @column dp_imbalance_max DOUBLE fmt=x  Largest dp_imbalance imbalance of any step. Sentence: The busiest DP rank carried {dp_imbalance_max} the mean rank's tokens in step {straggler_step}, {dp_imbalance_mean} on average.
-- @column straggler_step INTEGER fmt=count  The step with the most DP imbalance; earliest on a tie.
-- @column straggler_rank INTEGER fmt=count  The busiest DP rank in that step; NULL from verl metrics.
-- @column reward_imbalance_mean DOUBLE fmt=x  Mean over steps of reward_imbalance's imbalance (slowest / mean reward time). Sentence: The slowest rank's reward took {reward_imbalance_mean} the mean rank's on average.
-- @column wasted_token_frac DOUBLE fmt=pct  Response tokens never trained on over all response tokens, in steps with filter information. Sentence: {wasted_token_frac} of generated response tokens were filtered away and never trained on.
-- @column prefix_cache_hit DOUBLE fmt=pct  Cached over prompt tokens over all turns whose cached_tokens is known. Sentence: The prefix cache served {prefix_cache_hit} of multi-turn prompt tokens.
-- @column gen_share DOUBLE fmt=pct  sum(timing_s/gen) / sum(timing_s/step) over steps that log both. Sentence: Rollout generation took {gen_share} of step time (a step took {mean_step_s} on average).
-- @column mean_step_s DOUBLE fmt=s  Mean step time; timing_s/step over the steps that log it (s).
-- @column slowest_gen_share DOUBLE fmt=pct  Mean over steps of rollout_tail_verl's slowest_share: the slowest generation over the whole gen stage. Sentence: The slowest generation alone took {slowest_gen_share} of the gen stage on average.
-- @column gpu_idle_frac_mean DOUBLE fmt=pct  Mean over ranks of gpu_time's whole-trace idle share (idle_us / kernel_time_us, HTA's default without the last step). Sentence: GPUs sat idle {gpu_idle_frac_mean} of their profiled time on average (worst: rank {gpu_idle_rank}, {gpu_idle_frac_worst}).
-- @column gpu_idle_frac_worst DOUBLE fmt=pct  GPU idle on the idlest rank; the largest whole-trace idle share of any rank, NULL with a single rank.
-- @column gpu_idle_rank INTEGER fmt=count  The idlest rank; lowest on a tie, NULL with a single rank.
-- @column gpu_compute_frac_mean DOUBLE fmt=pct  Mean over ranks of gpu_time's whole-trace compute share (compute_us / kernel_time_us). Sentence: Compute kernels ran {gpu_compute_frac_mean} of the profiled GPU time; the rest went to communication, memory copies and idling.
-- @column whatif_best_policy VARCHAR  The dispatch that saves most; from a stored simulation (whatif_savings): the realizable dispatch (not as-recorded, not length-balanced, which knows every length) that saves the most GPU-hours over the run.
-- @column whatif_best_gpu_hours DOUBLE fmt=gpu_h  GPU-hours that dispatch saves over the run; whatif_savings' run_gpu_hours_saved.
-- @column whatif_best_saved_frac DOUBLE fmt=pct  Share of the as-recorded rollout time it saves.
-- @column whatif_gpus INTEGER fmt=count  GPUs the savings count (as in whatif).
-- @column whatif_oracle_gpu_hours DOUBLE fmt=gpu_h  GPU-hours length-balanced dispatch saves over the run; it knows every length in advance.
-- @column partial_steps BIGINT fmt=count  Steps holding under half the responses of the run's median step (partial_steps: cut short); NULL when none. Sentence: {partial_steps} steps were cut short (under half a typical step's responses) and left out of the length findings.
-- @chart table title="Headline findings"
WITH steps AS (
    SELECT step FROM step_lengths WHERE run_id = $run_id
    UNION SELECT step FROM step_metrics WHERE run_id = $run_id
    UNION SELECT step FROM rank_stage WHERE run_id = $run_id
    UNION SELECT step FROM profiler_steps WHERE run_id = $run_id),
gpu AS (
    -- gpu_time's whole-trace rows (step NULL), HTA's default, as 0-1 shares
    SELECT rank, idle_pct / 100 AS idle, compute_pct / 100 AS compute
    FROM gpu_shares
    WHERE step IS NULL AND NOT include_last_step),
gpu_summary AS (
    SELECT
        avg(idle) AS idle_mean,
        -- a worst rank only means something next to other ranks
        CASE WHEN count(idle) > 1 THEN max(idle) END AS idle_worst,
        CASE WHEN count(idle) > 1
             THEN first(rank ORDER BY idle DESC, rank) FILTER (WHERE idle IS NOT NULL) END AS idle_rank,
        avg(compute) AS compute_mean
    FROM gpu),
whatif_summary AS (
    -- the realizable dispatch (not as-recorded, not length-balanced, which knows every length)
    -- saving the most; partial rollout and caps change the algorithm or the config
    SELECT
        first(p.policy ORDER BY p.saved_s DESC, p.policy)
            FILTER (WHERE p.family = 'dispatch' AND p.policy NOT IN ('as-recorded', 'length-balanced'))
            AS best_policy,
        max(p.saved_s) FILTER (WHERE p.family = 'dispatch' AND p.policy NOT IN ('as-recorded', 'length-balanced'))
            * max(j.gpus) / 3600.0 AS best_gpu_hours,
        first(p.saved_frac ORDER BY p.saved_s DESC, p.policy)
            FILTER (WHERE p.family = 'dispatch' AND p.policy NOT IN ('as-recorded', 'length-balanced'))
            AS best_saved_frac,
        max(j.gpus)::INTEGER AS gpus,
        max(p.saved_s) FILTER (WHERE p.policy = 'length-balanced') * max(j.gpus) / 3600.0 AS oracle_gpu_hours
    FROM whatif_policies p
    CROSS JOIN whatif_job j),
per_step AS (
    SELECT
        s.step,
        l.n,
        l.response_max / NULLIF(l.response_p50, 0) AS tail_ratio,
        l.capped,
        l.cap_known,
        CASE WHEN l.filtered THEN l.response_tokens END AS filtered_tokens,
        CASE WHEN l.filtered THEN l.response_tokens - l.used_tokens END AS wasted_tokens,
        r.rollout_idle_frac AS idle,
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
        v.response_clip_ratio AS clip_ratio
    FROM steps s
    LEFT JOIN step_lengths l ON l.run_id = $run_id AND l.step = s.step
    LEFT JOIN rollout_steps r ON r.step = s.step
    LEFT JOIN dp_steps d ON d.step = s.step
    LEFT JOIN reward_steps w ON w.step = s.step
    LEFT JOIN step_turns t ON t.run_id = $run_id AND t.step = s.step
    LEFT JOIN step_timings m ON m.run_id = $run_id AND m.step = s.step
    LEFT JOIN verl_steps v ON v.step = s.step)
SELECT
    $run_id::VARCHAR AS run_id,
    count(*) AS steps,
    sum(n)::BIGINT AS samples,
    avg(idle) AS rollout_idle_frac_mean,
    max(idle) AS rollout_idle_frac_worst,
    first(step ORDER BY idle DESC, step) FILTER (WHERE idle IS NOT NULL) AS worst_idle_step,
    max(tail_ratio) AS tail_ratio_worst,
    first(step ORDER BY tail_ratio DESC, step) FILTER (WHERE tail_ratio IS NOT NULL)
        AS worst_tail_step,
    coalesce(sum(capped)::DOUBLE / NULLIF(sum(cap_known)::DOUBLE, 0),
             avg(clip_ratio) FILTER (WHERE n IS NULL)) AS cap_ratio,
    (SELECT max_response_len FROM runs WHERE run_id = $run_id) AS max_response_len,
    (SELECT gpus FROM whatif_job) AS gpus,
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
    (SELECT oracle_gpu_hours FROM whatif_summary) AS whatif_oracle_gpu_hours,
    (SELECT NULLIF(count(*), 0) FROM partial_steps) AS partial_steps
FROM per_step
HAVING (SELECT count(*) FROM runs WHERE run_id = $run_id) > 0

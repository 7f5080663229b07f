-- view: verl_steps
-- The per-step training-log metrics the catalog reads (canonical names: verl's, whatever framework
-- logged them), pivoted from canonical_metrics (one row per name) to
-- one row per step of $run_id: rollout timings, response lengths, throughput and MFU, per-token
-- stage costs and the DP token balance (global_seqlen/*), plus the ratios the queries report.
-- A key the step did not log is NULL. A query that lists only the steps that logged its own
-- keys keeps the rows where one of its columns is not NULL (ingest stores no NULL value).
-- @column step INTEGER fmt=count  Training step.
-- @column gen_s DOUBLE fmt=s  timing_s/gen: the whole rollout stage (s).
-- @column slowest_generate_s DOUBLE fmt=s  timing_s/agent_loop/slowest/generate_sequences, else timing_s/generation_timing/max (s).
-- @column fastest_generate_s DOUBLE fmt=s  timing_s/agent_loop/generate_sequences/min, else timing_s/generation_timing/min (s).
-- @column mean_generate_s DOUBLE fmt=s  timing_s/agent_loop/generate_sequences/mean (s).
-- @column slowest_response_len DOUBLE fmt=tokens  timing_s/agent_loop/slowest/response_length (tokens).
-- @column response_mean DOUBLE fmt=tokens  response_length/mean (tokens).
-- @column response_max DOUBLE fmt=tokens  response_length/max (tokens).
-- @column response_clip_ratio DOUBLE fmt=pct  response_length/clip_ratio.
-- @column throughput DOUBLE fmt=tokens  perf/throughput (tokens/s/GPU).
-- @column total_num_tokens DOUBLE fmt=tokens  perf/total_num_tokens (tokens).
-- @column time_per_step_s DOUBLE fmt=s  perf/time_per_step (s).
-- @column mfu_actor DOUBLE fmt=pct  perf/mfu/actor (0-1).
-- @column mfu_critic DOUBLE fmt=pct  perf/mfu/critic (0-1).
-- @column gen_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/gen (ms).
-- @column ref_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/ref (ms).
-- @column values_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/values (ms).
-- @column adv_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/adv (ms).
-- @column update_critic_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/update_critic (ms).
-- @column update_actor_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/update_actor (ms).
-- @column seqlen_min DOUBLE fmt=tokens  global_seqlen/min: tokens on the lightest DP rank.
-- @column seqlen_max DOUBLE fmt=tokens  global_seqlen/max: tokens on the heaviest DP rank.
-- @column seqlen_mean DOUBLE fmt=tokens  global_seqlen/mean: mean tokens per DP rank.
-- @column balanced_max DOUBLE fmt=tokens  global_seqlen/balanced_max: heaviest rank after balancing.
-- @column slowest_share DOUBLE fmt=pct  slowest_generate_s / gen_s.
-- @column response_tail_ratio DOUBLE fmt=x  response_max / response_mean.
-- @column seqlen_imbalance DOUBLE fmt=x  seqlen_max / seqlen_mean.
-- @column balanced_imbalance DOUBLE fmt=x  balanced_max / seqlen_mean.
SELECT
    *,
    slowest_generate_s / NULLIF(gen_s, 0) AS slowest_share,
    response_max / NULLIF(response_mean, 0) AS response_tail_ratio,
    seqlen_max / NULLIF(seqlen_mean, 0) AS seqlen_imbalance,
    balanced_max / NULLIF(seqlen_mean, 0) AS balanced_imbalance
FROM (
    SELECT
        step,
        max(CASE WHEN key = 'timing_s/gen' THEN value END) AS gen_s,
        coalesce(max(CASE WHEN key = 'timing_s/agent_loop/slowest/generate_sequences' THEN value END),
                 max(CASE WHEN key = 'timing_s/generation_timing/max' THEN value END)) AS slowest_generate_s,
        coalesce(max(CASE WHEN key = 'timing_s/agent_loop/generate_sequences/min' THEN value END),
                 max(CASE WHEN key = 'timing_s/generation_timing/min' THEN value END)) AS fastest_generate_s,
        max(CASE WHEN key = 'timing_s/agent_loop/generate_sequences/mean' THEN value END) AS mean_generate_s,
        max(CASE WHEN key = 'timing_s/agent_loop/slowest/response_length' THEN value END) AS slowest_response_len,
        max(CASE WHEN key = 'response_length/mean' THEN value END) AS response_mean,
        max(CASE WHEN key = 'response_length/max' THEN value END) AS response_max,
        max(CASE WHEN key = 'response_length/clip_ratio' THEN value END) AS response_clip_ratio,
        max(CASE WHEN key = 'perf/throughput' THEN value END) AS throughput,
        max(CASE WHEN key = 'perf/total_num_tokens' THEN value END) AS total_num_tokens,
        max(CASE WHEN key = 'perf/time_per_step' THEN value END) AS time_per_step_s,
        max(CASE WHEN key = 'perf/mfu/actor' THEN value END) AS mfu_actor,
        max(CASE WHEN key = 'perf/mfu/critic' THEN value END) AS mfu_critic,
        max(CASE WHEN key = 'timing_per_token_ms/gen' THEN value END) AS gen_ms_per_token,
        max(CASE WHEN key = 'timing_per_token_ms/ref' THEN value END) AS ref_ms_per_token,
        max(CASE WHEN key = 'timing_per_token_ms/values' THEN value END) AS values_ms_per_token,
        max(CASE WHEN key = 'timing_per_token_ms/adv' THEN value END) AS adv_ms_per_token,
        max(CASE WHEN key = 'timing_per_token_ms/update_critic' THEN value END) AS update_critic_ms_per_token,
        max(CASE WHEN key = 'timing_per_token_ms/update_actor' THEN value END) AS update_actor_ms_per_token,
        max(CASE WHEN key = 'global_seqlen/min' THEN value END) AS seqlen_min,
        max(CASE WHEN key = 'global_seqlen/max' THEN value END) AS seqlen_max,
        max(CASE WHEN key = 'global_seqlen/mean' THEN value END) AS seqlen_mean,
        max(CASE WHEN key = 'global_seqlen/balanced_max' THEN value END) AS balanced_max
    FROM canonical_metrics
    WHERE run_id = $run_id
      AND key IN ('timing_s/gen', 'timing_s/agent_loop/slowest/generate_sequences',
                  'timing_s/generation_timing/max', 'timing_s/agent_loop/generate_sequences/min',
                  'timing_s/generation_timing/min', 'timing_s/agent_loop/generate_sequences/mean',
                  'timing_s/agent_loop/slowest/response_length', 'response_length/mean',
                  'response_length/max', 'response_length/clip_ratio',
                  'perf/throughput', 'perf/total_num_tokens', 'perf/time_per_step', 'perf/mfu/actor',
                  'perf/mfu/critic', 'timing_per_token_ms/gen', 'timing_per_token_ms/ref',
                  'timing_per_token_ms/values', 'timing_per_token_ms/adv',
                  'timing_per_token_ms/update_critic', 'timing_per_token_ms/update_actor',
                  'global_seqlen/min', 'global_seqlen/max', 'global_seqlen/mean',
                  'global_seqlen/balanced_max')
    GROUP BY step) AS pivoted

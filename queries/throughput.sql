-- name: throughput
-- title: Throughput and MFU (verl)
-- section: Stages
-- Training throughput per step from verl's perf/* and timing_per_token_ms/* metrics:
-- tokens per second per GPU, tokens in the step, model FLOPs utilisation, and the cost
-- of each stage per token. Other perf/mfu/* keys, if any, are available through `metric`.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column throughput DOUBLE  perf/throughput: tokens per second per GPU (tokens/s/GPU).
-- @column total_num_tokens DOUBLE  perf/total_num_tokens: prompt + response tokens in the step.
-- @column time_per_step_s DOUBLE  perf/time_per_step (s).
-- @column mfu_actor DOUBLE  perf/mfu/actor: actor training MFU (0-1).
-- @column mfu_critic DOUBLE  perf/mfu/critic: critic training MFU (0-1).
-- @column gen_ms_per_token DOUBLE  timing_per_token_ms/gen (ms per response token).
-- @column ref_ms_per_token DOUBLE  timing_per_token_ms/ref (ms per token).
-- @column values_ms_per_token DOUBLE  timing_per_token_ms/values (ms per token).
-- @column adv_ms_per_token DOUBLE  timing_per_token_ms/adv (ms per token).
-- @column update_critic_ms_per_token DOUBLE  timing_per_token_ms/update_critic (ms per token).
-- @column update_actor_ms_per_token DOUBLE  timing_per_token_ms/update_actor (ms per token).
-- @chart line x=step y=throughput xlabel="step" ylabel="throughput (tokens/s/GPU)" title="Training throughput"
SELECT
    step,
    max(value) FILTER (WHERE key = 'perf/throughput') AS throughput,
    max(value) FILTER (WHERE key = 'perf/total_num_tokens') AS total_num_tokens,
    max(value) FILTER (WHERE key = 'perf/time_per_step') AS time_per_step_s,
    max(value) FILTER (WHERE key = 'perf/mfu/actor') AS mfu_actor,
    max(value) FILTER (WHERE key = 'perf/mfu/critic') AS mfu_critic,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/gen') AS gen_ms_per_token,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/ref') AS ref_ms_per_token,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/values') AS values_ms_per_token,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/adv') AS adv_ms_per_token,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/update_critic') AS update_critic_ms_per_token,
    max(value) FILTER (WHERE key = 'timing_per_token_ms/update_actor') AS update_actor_ms_per_token
FROM step_metrics
WHERE run_id = $run_id
  AND key IN ('perf/throughput', 'perf/total_num_tokens', 'perf/time_per_step', 'perf/mfu/actor',
              'perf/mfu/critic', 'timing_per_token_ms/gen', 'timing_per_token_ms/ref',
              'timing_per_token_ms/values', 'timing_per_token_ms/adv',
              'timing_per_token_ms/update_critic', 'timing_per_token_ms/update_actor')
GROUP BY step
ORDER BY step

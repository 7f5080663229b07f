-- name: throughput
-- title: Throughput and MFU (verl)
-- section: Training health
-- stored: yes
-- Training throughput per step from verl's perf/* and timing_per_token_ms/* metrics:
-- tokens per second per GPU, tokens in the step, model FLOPs utilisation, and the cost
-- of each stage per token. Other perf/mfu/* keys, if any, are available through `metric`.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column throughput DOUBLE fmt=tokens  perf/throughput: tokens per second per GPU (tokens/s/GPU).
-- @column total_num_tokens DOUBLE fmt=tokens  perf/total_num_tokens: prompt + response tokens in the step.
-- @column time_per_step_s DOUBLE fmt=s  perf/time_per_step (s).
-- @column mfu_actor DOUBLE fmt=pct  perf/mfu/actor: actor training MFU (0-1).
-- @column mfu_critic DOUBLE fmt=pct  perf/mfu/critic: critic training MFU (0-1).
-- @column gen_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/gen (ms per response token).
-- @column ref_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/ref (ms per token).
-- @column values_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/values (ms per token).
-- @column adv_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/adv (ms per token).
-- @column update_critic_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/update_critic (ms per token).
-- @column update_actor_ms_per_token DOUBLE fmt=ms  timing_per_token_ms/update_actor (ms per token).
-- @chart line x=step y=throughput xlabel="step" ylabel="throughput (tokens/s/GPU)" title="Training throughput"
SELECT
    step,
    throughput,
    total_num_tokens,
    time_per_step_s,
    mfu_actor,
    mfu_critic,
    gen_ms_per_token,
    ref_ms_per_token,
    values_ms_per_token,
    adv_ms_per_token,
    update_critic_ms_per_token,
    update_actor_ms_per_token
FROM verl_steps
WHERE coalesce(throughput, total_num_tokens, time_per_step_s, mfu_actor, mfu_critic, gen_ms_per_token,
               ref_ms_per_token, values_ms_per_token, adv_ms_per_token, update_critic_ms_per_token,
               update_actor_ms_per_token) IS NOT NULL
ORDER BY step

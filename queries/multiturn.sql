-- name: multiturn
-- title: Multi-turn rollouts
-- section: Multi-turn
-- stored: yes
-- Per step of an agentic run: turns per rollout, tool-call and engine latency quantiles,
-- and the prefix-cache hit rate. Slow tools and many turns stretch the rollout tail; a low
-- prefix_cache_hit means each turn re-prefills its whole context.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column rollouts BIGINT fmt=count  Rollouts with at least one turn.
-- @column turns BIGINT fmt=count  Assistant turns.
-- @column turns_mean DOUBLE fmt=count  turns / rollouts.
-- @column turns_max BIGINT fmt=count  Most turns in one rollout.
-- @column tool_calls BIGINT fmt=count  Tool calls.
-- @column tool_latency_p50 DOUBLE fmt=s  Median tool-call latency (s).
-- @column tool_latency_p99 DOUBLE fmt=s  99th percentile of tool-call latency (s).
-- @column engine_latency_p50 DOUBLE fmt=s  Median engine time of a turn (s).
-- @column engine_latency_p99 DOUBLE fmt=s  99th percentile of engine time of a turn (s).
-- @column prefix_cache_hit DOUBLE fmt=pct  sum(cached_tokens) / sum(prompt_tokens) over turns whose cached_tokens is known.
-- @chart line x=step y=engine_latency_p50,engine_latency_p99,tool_latency_p50,tool_latency_p99 xlabel="step" ylabel="latency (s)" title="Engine turn and tool-call latency"
SELECT
    step,
    rollouts,
    turns,
    turns / NULLIF(rollouts, 0) AS turns_mean,
    turns_max,
    tool_calls,
    tool_latency_p50,
    tool_latency_p99,
    engine_latency_p50,
    engine_latency_p99,
    cached_tokens / NULLIF(cache_prompt_tokens, 0) AS prefix_cache_hit
FROM step_turns
WHERE run_id = $run_id
ORDER BY step

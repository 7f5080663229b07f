-- One row per step that has multi-turn turns: turn, tool and prefix-cache figures.
-- @column run_id VARCHAR  Owning run.
-- @column step INTEGER  Training step.
-- @column rollouts BIGINT  Distinct (prompt_id, sample_id) with turns.
-- @column turns BIGINT  Turn rows.
-- @column turns_max BIGINT  Most turns in one rollout.
-- @column tool_calls BIGINT  tool_calls rows of the step.
-- @column tool_latency_p50 DOUBLE  quantile_cont(tool_calls.latency_s, 0.5) (s).
-- @column tool_latency_p99 DOUBLE  quantile_cont(tool_calls.latency_s, 0.99) (s).
-- @column engine_latency_p50 DOUBLE  quantile_cont(turns.engine_latency_s, 0.5) (s).
-- @column engine_latency_p99 DOUBLE  quantile_cont(turns.engine_latency_s, 0.99) (s).
-- @column cache_prompt_tokens BIGINT  prompt_tokens summed over turns whose cached_tokens is known.
-- @column cached_tokens BIGINT  cached_tokens summed over turns.
CREATE TABLE step_turns AS
WITH per_turn AS (
    SELECT
        step,
        count(*) AS turns,
        quantile_cont(engine_latency_s, [0.5, 0.99]) AS engine,
        sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL)::BIGINT AS cache_prompt_tokens,
        sum(cached_tokens)::BIGINT AS cached_tokens
    FROM turns
    WHERE run_id = $run_id
    GROUP BY step),
per_rollout AS (
    SELECT step, count(*) AS rollouts, max(turns) AS turns_max
    FROM (SELECT step, prompt_id, sample_id, count(*) AS turns
          FROM turns WHERE run_id = $run_id GROUP BY ALL)
    GROUP BY step),
tools AS (
    SELECT step, count(*) AS tool_calls, quantile_cont(latency_s, [0.5, 0.99]) AS latency
    FROM tool_calls
    WHERE run_id = $run_id
    GROUP BY step)
SELECT
    $run_id::VARCHAR AS run_id,
    per_turn.step,
    per_rollout.rollouts,
    per_turn.turns,
    per_rollout.turns_max,
    coalesce(tools.tool_calls, 0) AS tool_calls,
    tools.latency[1] AS tool_latency_p50,
    tools.latency[2] AS tool_latency_p99,
    per_turn.engine[1] AS engine_latency_p50,
    per_turn.engine[2] AS engine_latency_p99,
    per_turn.cache_prompt_tokens,
    per_turn.cached_tokens
FROM per_turn
JOIN per_rollout USING (step)
LEFT JOIN tools USING (step)

-- view: sample_times
-- One row per step of $run_id whose training log times its samples or logs its response lengths
-- (verl's agent loop): the slowest and the mean sample's time (generate_sequences + tool_calls)
-- and the rollout's long-tail share, the part of the rollout after the mean sample finished and
-- until the slowest did: (slowest - mean) / slowest, else, without agent-loop timings,
-- 1 - response_length/mean / response_length/max (decode-bound). step_budget splits the gen
-- stage with it, and finding_gen_long_tail sums it.
-- @column step INTEGER fmt=count  Training step.
-- @column slowest_sample_s DOUBLE fmt=s  The slowest sample: generate_sequences + tool_calls (s).
-- @column mean_sample_s DOUBLE fmt=s  The mean sample: generate_sequences/mean + tool_calls/mean (s).
-- @column long_tail_share DOUBLE fmt=pct  Share of the rollout's window after the mean sample finished.
SELECT
    step,
    slowest_sample_s,
    mean_sample_s,
    coalesce((slowest_sample_s - mean_sample_s) / NULLIF(slowest_sample_s, 0),
             1 - response_mean / NULLIF(response_max, 0)) AS long_tail_share
FROM (
    SELECT
        v.step,
        v.slowest_generate_s + coalesce(m.slowest_tool_s, 0) AS slowest_sample_s,
        v.mean_generate_s + coalesce(m.mean_tool_s, 0) AS mean_sample_s,
        v.response_mean,
        v.response_max
    FROM verl_steps v
    LEFT JOIN (
        SELECT
            step,
            max(value) FILTER (WHERE key = 'timing_s/agent_loop/slowest/tool_calls') AS slowest_tool_s,
            max(value) FILTER (WHERE key = 'timing_s/agent_loop/tool_calls/mean') AS mean_tool_s
        FROM canonical_metrics
        WHERE run_id = $run_id
          AND key IN ('timing_s/agent_loop/slowest/tool_calls', 'timing_s/agent_loop/tool_calls/mean')
        GROUP BY step) AS m ON m.step = v.step) AS t

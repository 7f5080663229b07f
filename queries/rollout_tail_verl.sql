-- name: rollout_tail_verl
-- title: Rollout long tail (verl)
-- section: Rollout tail
-- Evidence of the rollout long tail from verl's per-step metrics: how long the slowest
-- generation took against the whole gen stage and against the mean sample, and how
-- long the longest response is against the mean. The slowest generation is
-- timing_s/agent_loop/slowest/generate_sequences (agent loop) or else
-- timing_s/generation_timing/max; the fastest is .../generate_sequences/min or
-- .../generation_timing/min. `long_tail` marks steps whose slowest sample took more than
-- 3x the mean generation time (NULL when the log has no mean).
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column gen_s DOUBLE  timing_s/gen: the whole rollout stage (s).
-- @column slowest_generate_s DOUBLE  Generation time of the slowest sample or worker (s).
-- @column fastest_generate_s DOUBLE  Generation time of the fastest sample or worker (s).
-- @column mean_generate_s DOUBLE  timing_s/agent_loop/generate_sequences/mean: mean generation time per sample (s).
-- @column slowest_share DOUBLE  slowest_generate_s / gen_s: share of the gen stage spent waiting on the slowest.
-- @column slowest_response_len DOUBLE  timing_s/agent_loop/slowest/response_length: response tokens of the slowest sample.
-- @column response_mean DOUBLE  response_length/mean (tokens).
-- @column response_max DOUBLE  response_length/max (tokens).
-- @column response_clip_ratio DOUBLE  response_length/clip_ratio: share of responses cut at the length cap.
-- @column response_tail_ratio DOUBLE  response_max / response_mean.
-- @column long_tail BOOLEAN  slowest_generate_s > 3 * mean_generate_s.
-- @chart line x=step y=gen_s,slowest_generate_s,mean_generate_s xlabel="step" ylabel="time (s)" title="Slowest generation vs the gen stage"
WITH w AS (
    SELECT
        step,
        max(value) FILTER (WHERE key = 'timing_s/gen') AS gen_s,
        coalesce(max(value) FILTER (WHERE key = 'timing_s/agent_loop/slowest/generate_sequences'),
                 max(value) FILTER (WHERE key = 'timing_s/generation_timing/max')) AS slowest_generate_s,
        coalesce(max(value) FILTER (WHERE key = 'timing_s/agent_loop/generate_sequences/min'),
                 max(value) FILTER (WHERE key = 'timing_s/generation_timing/min')) AS fastest_generate_s,
        max(value) FILTER (WHERE key = 'timing_s/agent_loop/generate_sequences/mean') AS mean_generate_s,
        max(value) FILTER (WHERE key = 'timing_s/agent_loop/slowest/response_length') AS slowest_response_len,
        max(value) FILTER (WHERE key = 'response_length/mean') AS response_mean,
        max(value) FILTER (WHERE key = 'response_length/max') AS response_max,
        max(value) FILTER (WHERE key = 'response_length/clip_ratio') AS response_clip_ratio
    FROM step_metrics
    WHERE run_id = $run_id
      AND key IN ('timing_s/gen', 'timing_s/agent_loop/slowest/generate_sequences',
                  'timing_s/generation_timing/max', 'timing_s/agent_loop/generate_sequences/min',
                  'timing_s/generation_timing/min', 'timing_s/agent_loop/generate_sequences/mean',
                  'timing_s/agent_loop/slowest/response_length', 'response_length/mean',
                  'response_length/max', 'response_length/clip_ratio')
    GROUP BY step
)
SELECT
    step,
    gen_s,
    slowest_generate_s,
    fastest_generate_s,
    mean_generate_s,
    slowest_generate_s / NULLIF(gen_s, 0) AS slowest_share,
    slowest_response_len,
    response_mean,
    response_max,
    response_clip_ratio,
    response_max / NULLIF(response_mean, 0) AS response_tail_ratio,
    slowest_generate_s > 3 * mean_generate_s AS long_tail
FROM w
ORDER BY step

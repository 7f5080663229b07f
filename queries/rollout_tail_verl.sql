-- name: rollout_tail_verl
-- title: Rollout long tail (verl)
-- section: Rollout tail
-- stored: yes
-- Evidence of the rollout long tail from verl's per-step metrics: how long the slowest
-- generation took against the whole gen stage and against the mean sample, and how
-- long the longest response is against the mean. The slowest generation is
-- timing_s/agent_loop/slowest/generate_sequences (agent loop) or else
-- timing_s/generation_timing/max; the fastest is .../generate_sequences/min or
-- .../generation_timing/min. `long_tail` marks steps whose slowest sample took more than
-- 3x the mean generation time (NULL when the log has no mean).
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column gen_s DOUBLE fmt=s  timing_s/gen: the whole rollout stage (s).
-- @column slowest_generate_s DOUBLE fmt=s  Generation time of the slowest sample or worker (s).
-- @column fastest_generate_s DOUBLE fmt=s  Generation time of the fastest sample or worker (s).
-- @column mean_generate_s DOUBLE fmt=s  timing_s/agent_loop/generate_sequences/mean: mean generation time per sample (s).
-- @column slowest_share DOUBLE fmt=pct  slowest_generate_s / gen_s: share of the gen stage spent waiting on the slowest.
-- @column slowest_response_len DOUBLE fmt=tokens  timing_s/agent_loop/slowest/response_length: response tokens of the slowest sample.
-- @column response_mean DOUBLE fmt=tokens  response_length/mean (tokens).
-- @column response_max DOUBLE fmt=tokens  response_length/max (tokens).
-- @column response_clip_ratio DOUBLE fmt=pct  response_length/clip_ratio: share of responses cut at the length cap.
-- @column response_tail_ratio DOUBLE fmt=x  response_max / response_mean.
-- @column long_tail BOOLEAN  slowest_generate_s > 3 * mean_generate_s.
-- @chart line x=step y=gen_s,slowest_generate_s,mean_generate_s xlabel="step" ylabel="time (s)" title="Slowest generation vs the gen stage"
SELECT
    step,
    gen_s,
    slowest_generate_s,
    fastest_generate_s,
    mean_generate_s,
    slowest_share,
    slowest_response_len,
    response_mean,
    response_max,
    response_clip_ratio,
    response_tail_ratio,
    slowest_generate_s > 3 * mean_generate_s AS long_tail
FROM verl_steps
WHERE coalesce(gen_s, slowest_generate_s, fastest_generate_s, mean_generate_s, slowest_response_len,
               response_mean, response_max, response_clip_ratio) IS NOT NULL
ORDER BY step

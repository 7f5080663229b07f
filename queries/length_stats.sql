-- name: length_stats
-- title: Response length per step
-- section: Lengths
-- stored: yes
-- Response-length distribution per step: the long tail behind rollout idling. A high
-- tail_ratio means one response keeps every rollout engine waiting.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column n BIGINT fmt=count  Responses in the step.
-- @column prompt_mean DOUBLE fmt=tokens  Mean prompt length (tokens).
-- @column response_mean DOUBLE fmt=tokens  Mean response length (tokens).
-- @column response_p50 DOUBLE fmt=tokens  Median response length (tokens).
-- @column response_p90 DOUBLE fmt=tokens  90th percentile of response length (tokens).
-- @column response_p99 DOUBLE fmt=tokens  99th percentile of response length (tokens).
-- @column response_max INTEGER fmt=tokens  Longest response (tokens).
-- @column tail_ratio DOUBLE fmt=x  response_max / response_p50.
-- @column cv DOUBLE fmt=x  Coefficient of variation: stddev_pop / mean.
-- @column cap_ratio DOUBLE fmt=pct  Share of responses truncated or at or over the run's max_response_len; NULL when neither is known.
-- @chart band x=step y=response_p50,response_p90,response_p99,response_max xlabel="step" ylabel="response length (tokens)" title="Response length quantiles per step"
SELECT
    step,
    n,
    prompt_mean,
    response_mean,
    response_p50,
    response_p90,
    response_p99,
    response_max,
    response_max / NULLIF(response_p50, 0) AS tail_ratio,
    response_std / NULLIF(response_mean, 0) AS cv,
    capped / NULLIF(cap_known, 0) AS cap_ratio
FROM step_lengths
WHERE run_id = $run_id
ORDER BY step

-- name: length_stats
-- title: Response length per step
-- section: Lengths
-- Response-length distribution per step: the long tail behind rollout idling. A high
-- tail_ratio means one response keeps every rollout engine waiting.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column n BIGINT  Responses in the step.
-- @column prompt_mean DOUBLE  Mean prompt length (tokens).
-- @column response_mean DOUBLE  Mean response length (tokens).
-- @column response_p50 DOUBLE  Median response length (tokens).
-- @column response_p90 DOUBLE  90th percentile of response length (tokens).
-- @column response_p99 DOUBLE  99th percentile of response length (tokens).
-- @column response_max INTEGER  Longest response (tokens).
-- @column tail_ratio DOUBLE  response_max / response_p50.
-- @column cv DOUBLE  Coefficient of variation: stddev_pop / mean.
-- @column cap_ratio DOUBLE  Share of responses truncated, or at or over the run's max_response_len.
-- @chart band x=step y=response_p50,response_p90,response_p99,response_max xlabel="step" ylabel="response length (tokens)"
SELECT
    s.step,
    count(*) AS n,
    avg(s.prompt_len) AS prompt_mean,
    avg(s.response_len) AS response_mean,
    quantile_cont(s.response_len, 0.5) AS response_p50,
    quantile_cont(s.response_len, 0.9) AS response_p90,
    quantile_cont(s.response_len, 0.99) AS response_p99,
    max(s.response_len) AS response_max,
    max(s.response_len) / NULLIF(quantile_cont(s.response_len, 0.5), 0) AS tail_ratio,
    stddev_pop(s.response_len) / NULLIF(avg(s.response_len), 0) AS cv,
    avg(CASE
        WHEN s.truncated IS NOT NULL THEN s.truncated::INTEGER
        WHEN r.max_response_len IS NOT NULL THEN (s.response_len >= r.max_response_len)::INTEGER
        END) AS cap_ratio
FROM samples s
JOIN runs r USING (run_id)
WHERE s.run_id = $run_id
GROUP BY s.step
ORDER BY s.step

-- One row per step and log2 length bin: counts behind length_histogram.
-- @column run_id VARCHAR  Owning run.
-- @column step INTEGER  Training step.
-- @column bin INTEGER  0 holds length 0; bin k >= 1 holds lengths in [2^(k-1), 2^k).
-- @column responses BIGINT  Responses whose response_len falls in the bin.
CREATE TABLE step_length_bins AS
SELECT
    run_id,
    step,
    CASE WHEN response_len < 1 THEN 0 ELSE floor(log2(response_len))::INTEGER + 1 END AS bin,
    count(*) AS responses
FROM samples
WHERE run_id = $run_id AND response_len IS NOT NULL
GROUP BY ALL

-- name: length_histogram
-- title: Response length histogram
-- section: Lengths
-- stored: yes
-- How many responses fall in each power-of-two length bin over a range of steps. A long
-- right tail of sparse high bins is what leaves rollout engines waiting on a few responses.
-- @param run_id VARCHAR  Run to analyse.
-- @param step_from INTEGER = NULL  First step to count (inclusive); empty for the run's first step.
-- @param step_to INTEGER = NULL  Last step to count (inclusive); empty for the run's last step.
-- @column bin INTEGER fmt=count  Bin index: 0 holds length 0; bin k >= 1 holds lengths in [2^(k-1), 2^k).
-- @column bin_lo BIGINT fmt=tokens  Shortest length in the bin (tokens).
-- @column bin_hi BIGINT fmt=tokens  Exclusive upper bound of the bin (tokens).
-- @column label VARCHAR  The bin's lengths as text, e.g. 512-1023 (tokens).
-- @column responses BIGINT fmt=count  Responses in the bin; empty bins between the shortest and longest are listed with 0.
-- @column share DOUBLE fmt=pct  responses / all responses in the step range.
-- @column cum_share DOUBLE fmt=pct  Share of responses in this bin or a shorter one.
-- @chart hist x=label y=responses xlabel="response length (tokens, log2 bins)" ylabel="responses" title="Response length histogram"
WITH counts AS (
    SELECT bin, sum(responses)::BIGINT AS responses
    FROM step_length_bins
    WHERE run_id = $run_id
      AND ($step_from IS NULL OR step >= $step_from)
      AND ($step_to IS NULL OR step <= $step_to)
    GROUP BY bin),
bins AS (
    SELECT unnest(range(min(bin), max(bin) + 1))::INTEGER AS bin FROM counts),
filled AS (
    SELECT
        b.bin,
        CASE WHEN b.bin = 0 THEN 0 ELSE 1::BIGINT << (b.bin - 1) END AS bin_lo,
        1::BIGINT << b.bin AS bin_hi,
        coalesce(c.responses, 0) AS responses
    FROM bins b
    LEFT JOIN counts c USING (bin))
SELECT
    bin,
    bin_lo,
    bin_hi,
    CASE WHEN bin_hi - bin_lo = 1 THEN bin_lo::VARCHAR
         ELSE bin_lo::VARCHAR || '-' || (bin_hi - 1)::VARCHAR END AS label,
    responses,
    responses / NULLIF(sum(responses) OVER ()::DOUBLE, 0) AS share,
    sum(responses) OVER (ORDER BY bin)::DOUBLE / NULLIF(sum(responses) OVER ()::DOUBLE, 0) AS cum_share
FROM filled
ORDER BY bin

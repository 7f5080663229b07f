-- name: health_lengths
-- title: Response length per step
-- section: Training health
-- stored: yes
-- Mean and longest response per step from verl's response_length/* metrics, with the share
-- cut at the length cap: a length collapsing towards 1 token, or pinned at the cap, is the
-- first sign of a run going wrong. (Runs with samples draw these under Lengths.)
-- @param run_id VARCHAR  Run to examine.
-- @column step INTEGER fmt=count  Training step.
-- @column response_mean DOUBLE fmt=tokens  Mean response length (tokens).
-- @column response_max DOUBLE fmt=tokens  Longest response (tokens).
-- @column clip_ratio DOUBLE fmt=pct  Share of responses cut at the cap (verl's response_length/clip_ratio).
-- @chart line x=step y=response_mean,response_max xlabel="step" ylabel="response length (tokens)" title="Response length: mean and longest"
SELECT step, response_mean, response_max, clip_ratio
FROM length_steps
WHERE source = 'verl'
ORDER BY step

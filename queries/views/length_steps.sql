-- view: length_steps
-- One row per step of $run_id with a mean response length: from the step's samples, else from
-- verl's response_length/* metrics (verl_steps) for steps without samples.
-- @column step INTEGER fmt=count  Training step.
-- @column response_mean DOUBLE fmt=tokens  Mean response length (tokens).
-- @column response_max DOUBLE fmt=tokens  Longest response (tokens).
-- @column clip_ratio DOUBLE fmt=pct  verl's response_length/clip_ratio; NULL from samples.
-- @column source VARCHAR  'samples' or 'verl'.
SELECT step, response_mean, response_max::DOUBLE AS response_max, NULL::DOUBLE AS clip_ratio,
       'samples' AS source
FROM step_lengths
WHERE run_id = $run_id
UNION ALL
SELECT step, response_mean, response_max, response_clip_ratio, 'verl'
FROM verl_steps
WHERE response_mean IS NOT NULL AND NOT isnan(response_mean)
  AND step NOT IN (SELECT step FROM step_lengths WHERE run_id = $run_id)

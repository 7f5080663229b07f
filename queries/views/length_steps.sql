-- view: length_steps
-- One row per step of $run_id with a mean response length: from the step's samples, else from
-- verl's response_length/* metrics (verl_steps) for steps without samples; a step of samples cut
-- short is marked partial.
-- @column step INTEGER fmt=count  Training step.
-- @column response_mean DOUBLE fmt=tokens  Mean response length (tokens).
-- @column response_max DOUBLE fmt=tokens  Longest response (tokens).
-- @column clip_ratio DOUBLE fmt=pct  verl's response_length/clip_ratio; NULL from samples.
-- @column source VARCHAR  'samples' or 'verl'.
-- @column response_p50 DOUBLE fmt=tokens  Median response length (tokens); NULL from verl's metrics.
-- @column partial BOOLEAN  The step holds under half the responses of the run's median step (partial_steps).
SELECT step, response_mean, response_max::DOUBLE AS response_max, NULL::DOUBLE AS clip_ratio,
       'samples' AS source, response_p50,
       step IN (SELECT step FROM partial_steps) AS partial
FROM step_lengths
WHERE run_id = $run_id
UNION ALL
SELECT step, response_mean, response_max, response_clip_ratio, 'verl', NULL::DOUBLE, false
FROM verl_steps
WHERE response_mean IS NOT NULL AND NOT isnan(response_mean)
  AND step NOT IN (SELECT step FROM step_lengths WHERE run_id = $run_id)

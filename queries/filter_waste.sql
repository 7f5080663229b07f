-- name: filter_waste
-- title: Filtered-away generation
-- section: Other
-- stored: yes
-- Per step of a DAPO-style run: prompts generated, kept by the dynamic-sampling filter and
-- used for training, and the share of response tokens generated but never trained on.
-- Only steps with filter information are listed.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training (workload) step.
-- @column prompts BIGINT fmt=count  Prompts generated in the step.
-- @column kept BIGINT fmt=count  Prompts that passed the filter.
-- @column used BIGINT fmt=count  Prompts that went into the training batch.
-- @column response_tokens BIGINT fmt=tokens  Response tokens generated (tokens).
-- @column trained_tokens BIGINT fmt=tokens  Response tokens of used prompts (tokens).
-- @column wasted_tokens BIGINT fmt=tokens  response_tokens - trained_tokens (tokens).
-- @column wasted_token_frac DOUBLE fmt=pct  wasted_tokens / response_tokens.
-- @chart stacked x=step y=trained_tokens,wasted_tokens xlabel="step" ylabel="response tokens (tokens)" title="Generated tokens: trained on vs filtered away"
SELECT
    step,
    prompts,
    kept_prompts AS kept,
    used_prompts AS used,
    response_tokens,
    used_tokens AS trained_tokens,
    response_tokens - used_tokens AS wasted_tokens,
    (response_tokens - used_tokens) / NULLIF(response_tokens, 0) AS wasted_token_frac
FROM step_lengths
WHERE run_id = $run_id AND filtered
ORDER BY step

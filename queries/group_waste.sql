-- name: group_waste
-- title: Generation with no learning signal
-- section: Lengths
-- stored: yes
-- Per step: prompt groups (a prompt's samples, prompt_id) whose samples all got the same
-- reward. GRPO's advantage is a sample's reward minus its group's mean, so every sample of
-- such a group gets advantage 0 and its generation teaches the policy nothing. A group counts
-- when it has two or more samples with a reward; samples without a reward (or a NaN one) are
-- left out. Lengths are in the run's length_unit: tokens, or characters for a verl rollout
-- dump ingested without a tokenizer.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column groups BIGINT fmt=count  Prompt groups with a reward in the step.
-- @column zero_variance_groups BIGINT fmt=count  Groups of two or more samples whose rewards are all equal.
-- @column samples BIGINT fmt=count  Samples with a reward.
-- @column wasted_samples BIGINT fmt=count  Samples of the zero-variance groups.
-- @column wasted_share DOUBLE fmt=pct  wasted_samples / samples.
-- @column wasted_tokens BIGINT fmt=tokens  Response length of the wasted samples (tokens; characters when runs.length_unit is 'chars').
-- @column wasted_token_share DOUBLE fmt=pct  wasted_tokens / the response length of every sample with a reward.
-- @chart line x=step y=wasted_share,wasted_token_share xlabel="step" ylabel="share of the step's samples or response length" title="Generation in groups with one reward (zero GRPO advantage)"
SELECT
    step,
    count(*) AS groups,
    sum(CASE WHEN flat THEN 1 ELSE 0 END)::BIGINT AS zero_variance_groups,
    sum(n)::BIGINT AS samples,
    sum(CASE WHEN flat THEN n ELSE 0 END)::BIGINT AS wasted_samples,
    sum(CASE WHEN flat THEN n ELSE 0 END)::DOUBLE / NULLIF(sum(n)::DOUBLE, 0) AS wasted_share,
    sum(CASE WHEN flat THEN tokens ELSE 0 END)::BIGINT AS wasted_tokens,
    sum(CASE WHEN flat THEN tokens ELSE 0 END)::DOUBLE / NULLIF(sum(tokens)::DOUBLE, 0) AS wasted_token_share
FROM prompt_groups
GROUP BY step
ORDER BY step

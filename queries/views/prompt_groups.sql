-- view: prompt_groups
-- One row per prompt group (step, prompt_id) of $run_id with rewarded samples: how many, whether
-- their rewards are all equal (GRPO then gives each advantage 0), and their response length.
-- Samples without a reward or with a NaN one are left out.
-- @column step INTEGER fmt=count  Training step.
-- @column prompt_id INTEGER fmt=count  The prompt group in the step.
-- @column n BIGINT fmt=count  Samples with a reward.
-- @column flat BOOLEAN  Two or more samples whose rewards are all equal: a zero-variance group.
-- @column tokens BIGINT fmt=tokens  Their response length (tokens; characters when runs.length_unit is 'chars').
SELECT
    step,
    prompt_id,
    count(*) AS n,
    count(*) >= 2 AND min(reward) = max(reward) AS flat,
    sum(response_len)::BIGINT AS tokens
FROM samples
WHERE run_id = $run_id AND prompt_id IS NOT NULL AND reward IS NOT NULL AND NOT isnan(reward)
GROUP BY step, prompt_id

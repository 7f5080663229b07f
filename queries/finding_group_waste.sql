-- name: finding_group_waste
-- title: Finding: generation in groups with no learning signal
-- section: Findings
-- stored: yes
-- Response length spent on prompt groups whose samples all got the same reward, over every
-- step with rewarded groups (group_waste): GRPO gives each of their samples advantage 0, so that
-- generation trains nothing. Emitted at 10% or more of the response length: below it the most
-- a fix can save (that share of generation, which is itself only part of a step) is within
-- the step-to-step spread of step time; some all-solved and all-failed prompts are normal.
-- warn at 25% or more (as filter_waste), where a quarter of the rollout is thrown away.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  group_waste.
-- @column severity VARCHAR  warn at 25% or more, else info.
-- @column value DOUBLE fmt=pct  Share of the response length generated for zero-variance groups.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps with at least one zero-variance group.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step waste.
-- @chart table
WITH totals AS (
    SELECT
        sum(CASE WHEN flat THEN tokens ELSE 0 END)::BIGINT AS wasted,
        sum(tokens)::BIGINT AS tokens,
        sum(CASE WHEN flat THEN 1 ELSE 0 END)::BIGINT AS flat_groups,
        count(*) AS all_groups
    FROM prompt_groups),
flat_steps AS (
    SELECT list(step ORDER BY step) AS steps
    FROM (SELECT DISTINCT step FROM prompt_groups WHERE flat) AS flat_),
unit AS (
    SELECT CASE WHEN max(length_unit) = 'chars' THEN 'characters' ELSE 'tokens' END AS name
    FROM runs WHERE run_id = $run_id),
summary AS (
    SELECT t.*, t.wasted::DOUBLE / NULLIF(t.tokens::DOUBLE, 0) AS share, f.steps, u.name AS unit_name
    FROM totals t CROSS JOIN flat_steps f CROSS JOIN unit u)
SELECT
    'group_waste' AS kind,
    CASE WHEN share >= 0.25 THEN 'warn' ELSE 'info' END AS severity,
    share AS value,
    'share' AS unit,
    steps,
    'gen' AS stage,
    printf('%.0f%% of the generated response %s (%,d of %,d) went to %,d of %,d prompt groups whose '
           'samples all got the same reward: GRPO gives them zero advantage, so that generation '
           'trained nothing; skip such prompts before generating (DAPO-style dynamic sampling, or '
           'by past pass rate) or give hard prompts more samples.',
           100 * share, unit_name, wasted, tokens, flat_groups, all_groups) AS text,
    '/api/queries/group_waste?run_id=' || $run_id AS evidence
FROM summary
WHERE share >= 0.10

-- name: finding_filter_waste
-- title: Finding: generation thrown away by the DAPO filter
-- section: Findings
-- stored: yes
-- Response tokens generated but never trained on, over all steps with filter information
-- (filter_waste): prompts the dynamic-sampling filter dropped, and kept prompts left over once
-- the training batch was full. Emitted at 5% or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  filter_waste.
-- @column severity VARCHAR  warn at 25% or more, else info.
-- @column value DOUBLE fmt=pct  Share of generated response tokens never trained on.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps with filter information.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step waste.
-- @chart table
WITH steps AS (
    SELECT step, prompts, kept_prompts, used_prompts, response_tokens, used_tokens
    FROM step_lengths WHERE run_id = $run_id AND filtered),
summary AS (
    SELECT
        sum(response_tokens - used_tokens)::DOUBLE / NULLIF(sum(response_tokens)::DOUBLE, 0) AS share,
        sum(response_tokens - used_tokens)::BIGINT AS wasted,
        sum(prompts)::BIGINT AS prompts,
        sum(prompts - kept_prompts)::BIGINT AS dropped,
        sum(kept_prompts - used_prompts)::BIGINT AS left_over,
        list(step ORDER BY step) AS steps
    FROM steps)
SELECT
    'filter_waste' AS kind,
    CASE WHEN share >= 0.25 THEN 'warn' ELSE 'info' END AS severity,
    share AS value,
    'share' AS unit,
    steps,
    'gen' AS stage,
    printf('%.0f%% of generated response tokens (%,d) were never trained on: the filter dropped %,d '
           'of %,d prompts and %,d kept prompt%s left over once the batch was full; filter '
           'prompts before generating (e.g. by their past pass rate) or generate fewer per step.',
           100 * share, wasted, dropped, prompts, left_over,
           CASE WHEN left_over = 1 THEN ' was' ELSE 's were' END) AS text,
    '/api/queries/filter_waste?run_id=' || $run_id AS evidence
FROM summary
WHERE share >= 0.05

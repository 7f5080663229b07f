-- name: finding_whatif
-- title: Finding: rollout time another dispatch would save
-- section: Findings
-- From a stored simulation (whatif_savings): the dispatch policy (same samples, other
-- placement: round-robin or predicted-balanced) that saves the most GPU-hours against
-- as-recorded, and length-balanced dispatch, which knows every length in advance: it is called
-- the bound only when no other dispatch beats it. Partial rollout changes the algorithm (late
-- samples finish in a later step) and is not counted here. Emitted when a dispatch saves 1% of
-- rollout time or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  whatif.
-- @column severity VARCHAR  info.
-- @column value DOUBLE fmt=gpu_h  GPU-hours the best realizable dispatch saves over the run.
-- @column unit VARCHAR  GPU-hours.
-- @column steps INTEGER[]  Empty: the whole run.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of whatif_savings.
-- @chart table
WITH best AS (
    SELECT first(policy ORDER BY saved_s DESC, policy) AS policy, max(saved_s) AS saved_s,
           first(saved_frac ORDER BY saved_s DESC, policy) AS saved_frac
    FROM whatif_policies WHERE policy IN ('round-robin', 'predicted-balanced')),
oracle AS (
    SELECT saved_s, saved_frac FROM whatif_policies WHERE policy = 'length-balanced')
SELECT
    'whatif' AS kind,
    'info' AS severity,
    b.saved_s * j.gpus / 3600.0 AS value,
    'GPU-hours' AS unit,
    []::INTEGER[] AS steps,
    'gen' AS stage,
    printf('Dispatching samples %s would save %.3g GPU-hours over the run (%.0f%% of rollout time on '
           '%d GPUs)%s.',
           CASE b.policy WHEN 'predicted-balanced' THEN 'by predicted length (previous step, by prompt length)'
                         ELSE 'round-robin' END,
           b.saved_s * j.gpus / 3600.0, 100 * b.saved_frac, j.gpus,
           CASE WHEN o.saved_s IS NULL THEN ''
                WHEN o.saved_s >= b.saved_s
                THEN printf('; with every length known in advance, length-balanced dispatch would save '
                            '%.3g GPU-hours, more than any other dispatch simulated', o.saved_s * j.gpus / 3600.0)
                ELSE printf('; length-balanced dispatch (every length known in advance) would save only '
                            '%.3g', o.saved_s * j.gpus / 3600.0) END) AS text,
    '/api/queries/whatif_savings?run_id=' || $run_id AS evidence
FROM best b, whatif_job j LEFT JOIN oracle o ON true
WHERE b.saved_frac >= 0.01 AND j.gpus IS NOT NULL

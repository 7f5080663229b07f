-- name: finding_async_on_policy
-- title: Finding: an async run that trained on-policy
-- section: Findings
-- stored: yes
-- An async run whose largest staleness (staleness_steps) is 0 at every step that has one: every
-- sample was trained on by the weights that generated it. Said once, as information; no staleness
-- finding fires on such a run.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  async_on_policy.
-- @column severity VARCHAR  info.
-- @column value DOUBLE fmt=count  The largest staleness (0 versions).
-- @column unit VARCHAR  versions.
-- @column steps INTEGER[]  The steps with staleness figures.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_staleness.
-- @chart table
WITH summary AS (
    SELECT count(*) AS n, max(staleness_max) AS worst, list(step ORDER BY step) AS steps,
           CASE WHEN count(DISTINCT basis) = 1 THEN min(basis) ELSE 'mixed' END AS basis
    FROM staleness_steps
    WHERE staleness_max IS NOT NULL)
SELECT
    'async_on_policy' AS kind,
    'info' AS severity,
    worst AS value,
    'versions' AS unit,
    steps,
    'gen' AS stage,
    printf('Staleness was 0 at every one of the %d step%s with staleness figures (%s): this async run '
           'trained on-policy, each sample on the weights that generated it, so overlap bought no '
           'staleness; nothing to bound.', n, CASE WHEN n = 1 THEN '' ELSE 's' END, basis) AS text,
    '/api/queries/async_staleness?run_id=' || $run_id AS evidence
FROM summary
WHERE n > 0 AND worst = 0

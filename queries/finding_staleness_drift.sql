-- name: finding_staleness_drift
-- title: Finding: staleness grows over the run
-- section: Findings
-- stored: yes
-- Mean staleness (staleness_steps) over the last 10% of the steps that have it against the first
-- 10% (at least one step each, and four steps in all). Emitted when the samples arrive a whole
-- version older or more; warn.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  staleness_drift.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=count  Last-10% mean staleness minus first-10% mean (versions).
-- @column unit VARCHAR  versions.
-- @column steps INTEGER[]  The first and last steps compared.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_staleness.
-- @chart table
WITH ranked AS (
    SELECT step, staleness_mean AS value, row_number() OVER (ORDER BY step) AS i, count(*) OVER () AS n
    FROM staleness_steps
    WHERE staleness_mean IS NOT NULL AND NOT isnan(staleness_mean)),
cmp AS (
    SELECT
        max(n) AS n,
        greatest(1, floor(max(n) * 0.1))::INTEGER AS k,
        avg(value) FILTER (WHERE i <= greatest(1, floor(n * 0.1))) AS first_mean,
        avg(value) FILTER (WHERE i > n - greatest(1, floor(n * 0.1))) AS last_mean,
        list(step ORDER BY step) FILTER (WHERE i <= greatest(1, floor(n * 0.1))
                                          OR i > n - greatest(1, floor(n * 0.1))) AS steps
    FROM ranked)
SELECT
    'staleness_drift' AS kind,
    'warn' AS severity,
    last_mean - first_mean AS value,
    'versions' AS unit,
    steps,
    'gen' AS stage,
    printf('Mean staleness grew from %.2f to %.2f versions (%s of %d): the samples trained on arrive '
           'older as the run goes on; compare the queue depth and the two pools'' idle over the run, '
           'and bound staleness before it changes the update.',
           first_mean, last_mean,
           CASE WHEN k = 1 THEN 'first and last step' ELSE printf('first and last %d steps', k) END, n) AS text,
    '/api/queries/async_staleness?run_id=' || $run_id AS evidence
FROM cmp
WHERE n >= 4 AND last_mean - first_mean >= 1

-- name: finding_staleness_bound
-- title: Finding: staleness above the configured bound
-- section: Findings
-- stored: yes
-- Steps whose largest staleness (staleness_steps: consuming version minus the version of a
-- trajectory's first token) is above the bound the run was configured with (async_bound: the
-- run fact max_staleness, AReaL's max_head_offpolicyness, NeMo-RL's max_trajectory_age_steps).
-- Silent without a bound or with every step within it.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  staleness_bound.
-- @column severity VARCHAR  critical.
-- @column value DOUBLE fmt=count  The largest staleness seen (versions).
-- @column unit VARCHAR  versions.
-- @column steps INTEGER[]  The steps above the bound.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_staleness.
-- @chart table
WITH checked AS (
    SELECT s.step, s.staleness_max, max(s.staleness_max) OVER () AS top, b.bound, b.bound_from
    FROM staleness_steps s CROSS JOIN async_bound b
    WHERE s.staleness_max IS NOT NULL AND b.bound IS NOT NULL),
summary AS (
    SELECT
        count(*) AS checked_steps,
        count(*) FILTER (WHERE staleness_max > bound) AS over_steps,
        max(staleness_max) AS worst,
        min(step) FILTER (WHERE staleness_max = top) AS worst_step,  -- the first, of steps tied
        min(step) FILTER (WHERE staleness_max > bound) AS first_step,
        list(step ORDER BY step) FILTER (WHERE staleness_max > bound) AS steps,
        min(bound) AS bound,
        min(bound_from) AS bound_from
    FROM checked)
SELECT
    'staleness_bound' AS kind,
    'critical' AS severity,
    worst AS value,
    'versions' AS unit,
    steps,
    'gen' AS stage,
    printf('Staleness reached %s versions (step %d), above the configured bound of %d (%s), at %d of %d '
           'steps from step %d: those steps trained on samples older than the run allows; check how the '
           'bound is enforced, after a restart from a checkpoint too (AReaL issue 1388), and lower the '
           'queue size or the bound.',
           CASE WHEN worst = round(worst) THEN printf('%d', round(worst)::BIGINT) ELSE printf('%.2f', worst) END,
           worst_step, bound, bound_from, over_steps, checked_steps, first_step) AS text,
    '/api/queries/async_staleness?run_id=' || $run_id AS evidence
FROM summary
WHERE over_steps > 0

-- name: finding_trainer_starved
-- title: Finding: the trainer waits for samples
-- section: Findings
-- stored: yes
-- An async run's trainer waiting for enough samples to fill its batch (async_pools), summed over
-- the steps that logged the wait and a step time, against their step time: rollout is the
-- bottleneck. Emitted at 10% or more; warn.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  trainer_starved.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=pct  The trainer's wait over its step time.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps counted.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_idle.
-- @chart table
WITH steps AS (
    SELECT step, step_s, trainer_wait_s, trainer_idle_ratio, max(trainer_idle_ratio) OVER () AS top
    FROM async_pools WHERE trainer_wait_s IS NOT NULL AND step_s > 0),
summary AS (
    SELECT
        sum(trainer_wait_s)::DOUBLE AS wait_s,
        sum(step_s)::DOUBLE AS step_s,
        count(*) AS n,
        min(step) FILTER (WHERE trainer_idle_ratio = top) AS worst_step,  -- the first, of steps tied
        max(trainer_idle_ratio) AS worst,
        list(step ORDER BY step) AS steps
    FROM steps)
SELECT
    'trainer_starved' AS kind,
    'warn' AS severity,
    wait_s / NULLIF(step_s, 0) AS value,
    'share' AS unit,
    steps,
    'gen' AS stage,
    printf('The trainer waited for samples %.0f%% of its step time (%,.1f s of %,.1f s over %d step%s; '
           'worst step %d at %.0f%%): generation is the bottleneck; give the rollout pool more GPUs (or '
           'the trainer fewer), or let rollout run further ahead with a larger staleness bound or queue.',
           100 * wait_s / NULLIF(step_s, 0), wait_s, step_s, n, CASE WHEN n = 1 THEN '' ELSE 's' END,
           worst_step, 100 * worst) AS text,
    '/api/queries/async_idle?run_id=' || $run_id AS evidence
FROM summary
WHERE n > 0 AND wait_s / NULLIF(step_s, 0) >= 0.10

-- name: finding_rollouter_idle
-- title: Finding: the rollout engines sit idle
-- section: Findings
-- stored: yes
-- An async run's rollout engines generating nothing inside their windows between weight updates
-- (async_pools: queue full, paused for the sync, held by the staleness bound), summed over the
-- steps that logged a window, against those windows; from the logged ratios' mean where no window
-- is logged in seconds. Emitted at 10% or more; warn.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  rollouter_idle.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=pct  The rollout engines' idle share of their windows.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps counted.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_idle.
-- @chart table
WITH summary AS (
    SELECT
        sum(rollout_idle_s) FILTER (WHERE rollout_window_s > 0)::DOUBLE AS idle_s,
        sum(rollout_window_s) FILTER (WHERE rollout_window_s > 0 AND rollout_idle_s IS NOT NULL)::DOUBLE AS window_s,
        avg(rollout_idle_ratio) AS mean_ratio,
        count(*) AS n,
        list(step ORDER BY step) AS steps
    FROM async_pools
    WHERE rollout_idle_ratio IS NOT NULL),
share AS (
    SELECT *, coalesce(idle_s / NULLIF(window_s, 0), mean_ratio) AS idle_share FROM summary)
SELECT
    'rollouter_idle' AS kind,
    'warn' AS severity,
    idle_share AS value,
    'share' AS unit,
    steps,
    'gen' AS stage,
    printf('The rollout engines sat idle %.0f%% of their time between weight updates (%s over %d step%s): '
           'the trainer, or the staleness bound that stops rollout running further ahead, holds them '
           'back; move GPUs from the rollout pool to the trainer, or raise the bound (or queue size) if '
           'the algorithm tolerates older samples.',
           100 * idle_share,
           CASE WHEN window_s > 0 THEN printf('%,.1f s of %,.1f s', idle_s, window_s)
                ELSE 'the mean of the logged idle ratios' END,
           n, CASE WHEN n = 1 THEN '' ELSE 's' END) AS text,
    '/api/queries/async_idle?run_id=' || $run_id AS evidence
FROM share
WHERE n > 0 AND idle_share >= 0.10

-- name: finding_weight_sync
-- title: Finding: weight synchronisation takes a large share of the step
-- section: Findings
-- stored: yes
-- Any run, synchronous or async: the seconds spent pushing the trainer's weights to the rollout
-- engines (timing_s/update_weights + timing_s/sync_rollout_weights inside the step; an async run's
-- async/weight_sync_s, logged apart from the step's timer, is added to its step) against the step
-- time, over the steps that logged both. Emitted at 20% or more; warn.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  weight_sync.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=pct  Weight sync over step time.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps counted.
-- @column stage VARCHAR  update_weights.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of step_budget, or of async_budget for an async run.
-- @chart table
WITH logged AS (
    SELECT
        step,
        max(value) FILTER (WHERE key = 'timing_s/step') AS step_s,
        max(value) FILTER (WHERE key = 'timing_s/gen') AS gen_s,
        max(value) FILTER (WHERE key = 'timing_s/update_actor') AS update_s,
        CASE WHEN count(*) FILTER (WHERE key IN ('timing_s/update_weights', 'timing_s/sync_rollout_weights')) > 0
             THEN sum(value) FILTER (WHERE key IN ('timing_s/update_weights', 'timing_s/sync_rollout_weights'))::DOUBLE
        END AS sync_in_s
    FROM canonical_metrics
    WHERE run_id = $run_id
      AND key IN ('timing_s/step', 'timing_s/gen', 'timing_s/update_actor', 'timing_s/update_weights',
                  'timing_s/sync_rollout_weights')
    GROUP BY step),
steps AS (
    SELECT
        g.step,
        g.step_s + coalesce(a.weight_sync_s, 0) AS total_s,
        coalesce(g.sync_in_s, 0) + coalesce(a.weight_sync_s, 0) AS sync_s,
        g.gen_s,
        g.update_s,
        a.weight_sync_s IS NOT NULL AS apart
    FROM logged g
    LEFT JOIN async_logged a ON a.step = g.step
    WHERE g.step_s > 0 AND (g.sync_in_s IS NOT NULL OR a.weight_sync_s IS NOT NULL)),
summary AS (
    SELECT
        sum(sync_s)::DOUBLE AS sync_s,
        sum(total_s)::DOUBLE AS total_s,
        count(*) AS n,
        avg(gen_s) AS gen_mean,
        avg(update_s) AS update_mean,
        bool_or(apart) AS async_run,
        list(step ORDER BY step) AS steps
    FROM steps)
SELECT
    'weight_sync' AS kind,
    'warn' AS severity,
    sync_s / NULLIF(total_s, 0) AS value,
    'share' AS unit,
    steps,
    'update_weights' AS stage,
    printf('Weight sync took %.0f%% of step time (%.1f s per step on average over %d step%s%s): try '
           'syncing less often (several updates per sync), a faster or asynchronous transport (NCCL or '
           'CUDA IPC rather than disk), or trainer and rollout layouts that need less resharding.',
           100 * sync_s / NULLIF(total_s, 0), sync_s / NULLIF(n, 0), n, CASE WHEN n = 1 THEN '' ELSE 's' END,
           CASE WHEN async_run AND update_mean IS NOT NULL
                    THEN printf(', against %.1f s of actor update', update_mean)
                WHEN NOT async_run AND gen_mean IS NOT NULL AND update_mean IS NOT NULL
                    THEN printf(', against %.1f s of generation and %.1f s of actor update', gen_mean, update_mean)
                ELSE '' END) AS text,
    CASE WHEN async_run THEN '/api/queries/async_budget?run_id=' ELSE '/api/queries/step_budget?run_id=' END
        || $run_id AS evidence
FROM summary
WHERE n > 0 AND sync_s / NULLIF(total_s, 0) >= 0.20

-- name: async_staleness
-- title: Async: staleness per step
-- section: Async
-- stored: yes
-- How many policy versions old the samples each step trained on were: the consuming version minus
-- the version that generated a trajectory's first token (0 = on-policy), least, mean and largest,
-- with the median and 90th percentile where per-trajectory versions exist, beside the run's
-- configured bound. basis says whether a step's figures come from its trajectories or from the
-- framework's logged per-step aggregates; the logged columns show the framework's own figure
-- beside a per-sample step's. Only async runs have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column basis VARCHAR  'per-sample' (trajectories table) or 'logged' (the framework's per-step aggregates).
-- @column trajectories BIGINT fmt=count  Accepted trajectories with a consume version (per-sample steps).
-- @column staleness_min DOUBLE fmt=count  Least staleness (versions).
-- @column staleness_mean DOUBLE fmt=count  Mean staleness (versions).
-- @column staleness_p50 DOUBLE fmt=count  Median staleness (versions; per-sample steps).
-- @column staleness_p90 DOUBLE fmt=count  90th percentile of staleness (versions; per-sample steps).
-- @column staleness_max DOUBLE fmt=count  Largest staleness (versions).
-- @column bound INTEGER fmt=count  The configured staleness bound (versions, async_bound); NULL when unknown.
-- @column bound_from VARCHAR  Where the bound came from: runs.max_staleness or a config key.
-- @column logged_staleness_mean DOUBLE fmt=count  The framework's logged mean staleness on the same step (per-sample steps: a check; AReaL's is token-weighted).
-- @column logged_staleness_max DOUBLE fmt=count  The framework's logged largest staleness on the same step.
-- @chart line x=step y=staleness_min,staleness_mean,staleness_max,bound xlabel="step" ylabel="staleness (policy versions)" title="Staleness of the samples each step trained on"
SELECT
    s.step, s.basis, s.trajectories, s.staleness_min, s.staleness_mean, s.staleness_p50,
    s.staleness_p90, s.staleness_max, b.bound, b.bound_from, s.logged_staleness_mean,
    s.logged_staleness_max
FROM staleness_steps s
CROSS JOIN async_bound b
WHERE s.staleness_max IS NOT NULL OR s.staleness_mean IS NOT NULL
ORDER BY s.step

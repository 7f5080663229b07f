-- name: async_partial
-- title: Async: partial rollouts resumed across weight updates
-- section: Async
-- stored: yes
-- Trajectories whose generation was interrupted by a weight update and resumed under the new
-- weights, so that their tokens come from several policy versions: how many per step, their share,
-- the interruptions resumed and the widest span. Partial rollout trades a wait at each sync for
-- samples of mixed versions. Only async runs that have partial rollouts have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column basis VARCHAR  'per-sample' or 'logged' (staleness_steps).
-- @column trajectories BIGINT fmt=count  Accepted trajectories with a consume version (per-sample steps).
-- @column partial BIGINT fmt=count  Trajectories whose generation spanned a weight update.
-- @column partial_share DOUBLE fmt=pct  partial / trajectories; logged: the framework's partial ratio.
-- @column resumes BIGINT fmt=count  Interruptions resumed over the step's trajectories, where logged.
-- @column in_flight_max DOUBLE fmt=count  Widest span of one trajectory (versions).
-- @chart bar x=step y=partial xlabel="step" ylabel="trajectories" title="Partial rollouts resumed across weight updates"
SELECT
    s.step,
    s.basis,
    s.trajectories,
    s.partial,
    CASE WHEN s.basis = 'per-sample' THEN s.partial / NULLIF(s.trajectories, 0)
         ELSE l.partial_ratio END AS partial_share,
    s.resumes,
    s.in_flight_max
FROM staleness_steps s
LEFT JOIN async_logged l ON l.step = s.step
WHERE s.partial > 0 OR s.in_flight_max > 0 OR l.partial_ratio > 0
ORDER BY s.step

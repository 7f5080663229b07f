-- name: async_staleness_hist
-- title: Async: staleness distribution per step
-- section: Async
-- stored: yes
-- How a step's trained trajectories spread over staleness (consuming version minus the version of
-- their first token), from per-trajectory versions: one row per step and staleness value with the
-- count and its share of the step's accepted trajectories. A steady async run keeps its mass at 0
-- and 1; a tail at high staleness is samples that waited long in the queue or were generated
-- across many weight updates.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column staleness INTEGER fmt=count  Staleness (versions).
-- @column trajectories BIGINT fmt=count  Accepted trajectories of the step with this staleness.
-- @column share DOUBLE fmt=pct  Their share of the step's accepted trajectories with a consume version.
-- @chart heatmap x=step y=staleness z=share xlabel="step" ylabel="staleness (policy versions)" title="Staleness distribution per step"
SELECT
    step,
    consume_version - start_version AS staleness,
    count(*) AS trajectories,
    count(*) / NULLIF(sum(count(*)) OVER (PARTITION BY step)::DOUBLE, 0) AS share
FROM trajectories
WHERE run_id = $run_id AND status = 'accepted' AND step IS NOT NULL
  AND consume_version IS NOT NULL AND start_version IS NOT NULL
GROUP BY step, consume_version - start_version
ORDER BY step, staleness

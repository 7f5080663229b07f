-- name: metric
-- title: One metric over steps
-- section: Other
-- Any single logged metric over the run's steps, by its exact key (see metric_keys for
-- the keys a run has).
-- @param run_id VARCHAR  Run to analyse.
-- @param key VARCHAR  Metric key as logged, e.g. timing_s/gen or critic/score/mean.
-- @column step INTEGER fmt=count  Training step.
-- @column value DOUBLE fmt=count  The metric's value at that step.
-- @chart line x=step y=value xlabel="step" ylabel="value" title="Metric over steps"
SELECT step, value
FROM step_metrics
WHERE run_id = $run_id AND key = $key
ORDER BY step

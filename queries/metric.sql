-- name: metric
-- title: One metric over steps
-- section: Other
-- Any single logged metric over the run's steps, by its exact key as logged or, where no key is
-- logged under that name, by its canonical name (store/vocabulary: response_length/mean reads an
-- OpenRLHF run's rollout/response_length in tokens). metric_keys lists both for a run.
-- @param run_id VARCHAR  Run to analyse.
-- @param key VARCHAR  Metric key as logged, or a canonical name, e.g. timing_s/gen or critic/score/mean.
-- @column step INTEGER fmt=count  Training step.
-- @column value DOUBLE fmt=count  The metric's value at that step (a canonical name: in its canonical unit).
-- @chart line x=step y=value xlabel="step" ylabel="value" title="Metric over steps"
SELECT step, value
FROM step_metrics
WHERE run_id = $run_id AND key = $key
UNION ALL
SELECT step, value
FROM canonical_metrics
WHERE run_id = $run_id AND key = $key
  AND NOT EXISTS (SELECT 1 FROM step_metrics WHERE run_id = $run_id AND key = $key)
ORDER BY step

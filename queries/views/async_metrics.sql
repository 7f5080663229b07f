-- view: async_metrics
-- probed: yes
-- One row per step and async name of $run_id: the run's asynchronous-training metrics under their
-- canonical names and units (store/vocabulary/canonical-async.toml), whatever framework logged
-- them: canonical_metrics maps each framework's keys (store/vocabulary/<framework>-async.toml).
-- @column step INTEGER fmt=count  Training step (verl fully-async: the weight version the line was logged at).
-- @column key VARCHAR  Canonical name, async/...
-- @column value DOUBLE fmt=count  The value in the name's unit (versions, seconds, counts or a 0-1 share).
SELECT step, key, value
FROM canonical_metrics
WHERE run_id = $run_id AND starts_with(key, 'async/') AND NOT isnan(value)

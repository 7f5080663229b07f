-- view: async_metrics
-- One row per step and async name of $run_id: the run's asynchronous-training metrics under their
-- canonical names and units (store/vocabulary/canonical-async.toml). Until canonical_metrics is on
-- this branch it reads step_metrics through verl's mapping (store/vocabulary/verl-async.toml),
-- verl's keys as logged; then it is `SELECT step, key, value FROM canonical_metrics WHERE run_id =
-- $run_id AND starts_with(key, 'async/')`, whatever framework logged them.
-- @column step INTEGER fmt=count  Training step (verl fully-async: the weight version the line was logged at).
-- @column key VARCHAR  Canonical name, async/...
-- @column value DOUBLE fmt=count  The value in the name's unit (versions, seconds, counts or a 0-1 share).
SELECT
    step,
    CASE key
        WHEN 'training/off_policy/trajectory_staleness_worst/mean' THEN 'async/staleness/mean'
        WHEN 'training/off_policy/trajectory_staleness_worst/max' THEN 'async/staleness/max'
        WHEN 'training/off_policy/trajectory_staleness_worst/min' THEN 'async/staleness/min'
        WHEN 'training/off_policy/trajectory_staleness/mean' THEN 'async/staleness_in_queue/mean'
        WHEN 'training/off_policy/trajectory_staleness/max' THEN 'async/staleness_in_queue/max'
        WHEN 'fully_async/partial/max_partial_span' THEN 'async/in_flight/max'
        WHEN 'fully_async/partial/total_partial_num' THEN 'async/partial_resumed'
        WHEN 'fully_async/partial/partial_ratio' THEN 'async/partial_ratio'
        WHEN 'fully_async/total_wait_time' THEN 'async/trainer_wait_s'
        WHEN 'trainer/idle_ratio' THEN 'async/trainer_idle_ratio'
        WHEN 'rollouter/idle_ratio' THEN 'async/rollout_idle_ratio'
        WHEN 'rollouter/active_time' THEN 'async/rollout_active_s'
        WHEN 'rollouter/version_time' THEN 'async/rollout_window_s'
        WHEN 'timing_s/param_sync' THEN 'async/weight_sync_s'
        WHEN 'fully_async/monitor/queue/mq_queue_size' THEN 'async/queue_depth'
        WHEN 'training/off_policy/dropped_samples' THEN 'async/stale_dropped'
        WHEN 'fully_async/count/dropped_stale_samples' THEN 'async/stale_dropped_total'
        WHEN 'fully_async/count/total_generated_samples' THEN 'async/generated_total'
    END AS key,
    value
FROM step_metrics
WHERE run_id = $run_id
  AND key IN ('training/off_policy/trajectory_staleness_worst/mean',
              'training/off_policy/trajectory_staleness_worst/max',
              'training/off_policy/trajectory_staleness_worst/min',
              'training/off_policy/trajectory_staleness/mean',
              'training/off_policy/trajectory_staleness/max',
              'fully_async/partial/max_partial_span', 'fully_async/partial/total_partial_num',
              'fully_async/partial/partial_ratio', 'fully_async/total_wait_time', 'trainer/idle_ratio',
              'rollouter/idle_ratio', 'rollouter/active_time', 'rollouter/version_time',
              'timing_s/param_sync', 'fully_async/monitor/queue/mq_queue_size',
              'training/off_policy/dropped_samples', 'fully_async/count/dropped_stale_samples',
              'fully_async/count/total_generated_samples')
  AND NOT isnan(value)

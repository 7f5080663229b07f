-- view: async_logged
-- One row per step of $run_id that logged any async metric: async_metrics pivoted, one column per
-- canonical name, plus the step's own stale drops and generated samples from the running totals
-- (a total's difference with the previous step that logged it; the first such step counts from
-- zero). A name the step did not log is NULL.
-- @column step INTEGER fmt=count  Training step.
-- @column staleness_mean DOUBLE fmt=count  async/staleness/mean (versions).
-- @column staleness_max DOUBLE fmt=count  async/staleness/max (versions).
-- @column staleness_min DOUBLE fmt=count  async/staleness/min (versions).
-- @column in_queue_mean DOUBLE fmt=count  async/staleness_in_queue/mean (versions).
-- @column in_queue_max DOUBLE fmt=count  async/staleness_in_queue/max (versions).
-- @column in_flight_max DOUBLE fmt=count  async/in_flight/max (versions).
-- @column partial_resumed DOUBLE fmt=count  async/partial_resumed (trajectories).
-- @column partial_ratio DOUBLE fmt=pct  async/partial_ratio.
-- @column trainer_wait_s DOUBLE fmt=s  async/trainer_wait_s (s).
-- @column trainer_idle_ratio DOUBLE fmt=pct  async/trainer_idle_ratio.
-- @column rollout_idle_ratio DOUBLE fmt=pct  async/rollout_idle_ratio.
-- @column rollout_active_s DOUBLE fmt=s  async/rollout_active_s (s).
-- @column rollout_window_s DOUBLE fmt=s  async/rollout_window_s (s).
-- @column weight_sync_s DOUBLE fmt=s  async/weight_sync_s (s), logged apart from the step's timer.
-- @column queue_depth DOUBLE fmt=count  async/queue_depth (samples).
-- @column stale_dropped DOUBLE fmt=count  Samples dropped as too stale in the step: async/stale_dropped, else the step's difference of async/stale_dropped_total.
-- @column generated DOUBLE fmt=count  Samples generated in the step: the difference of async/generated_total.
SELECT
    step,
    staleness_mean, staleness_max, staleness_min, in_queue_mean, in_queue_max, in_flight_max,
    partial_resumed, partial_ratio, trainer_wait_s, trainer_idle_ratio, rollout_idle_ratio,
    rollout_active_s, rollout_window_s, weight_sync_s, queue_depth,
    coalesce(stale_dropped, stale_dropped_total - coalesce(lag(stale_dropped_total) OVER (
        PARTITION BY stale_dropped_total IS NULL ORDER BY step), 0)) AS stale_dropped,
    generated_total - coalesce(lag(generated_total) OVER (
        PARTITION BY generated_total IS NULL ORDER BY step), 0) AS generated
FROM (
    SELECT
        step,
        max(value) FILTER (WHERE key = 'async/staleness/mean') AS staleness_mean,
        max(value) FILTER (WHERE key = 'async/staleness/max') AS staleness_max,
        max(value) FILTER (WHERE key = 'async/staleness/min') AS staleness_min,
        max(value) FILTER (WHERE key = 'async/staleness_in_queue/mean') AS in_queue_mean,
        max(value) FILTER (WHERE key = 'async/staleness_in_queue/max') AS in_queue_max,
        max(value) FILTER (WHERE key = 'async/in_flight/max') AS in_flight_max,
        max(value) FILTER (WHERE key = 'async/partial_resumed') AS partial_resumed,
        max(value) FILTER (WHERE key = 'async/partial_ratio') AS partial_ratio,
        max(value) FILTER (WHERE key = 'async/trainer_wait_s') AS trainer_wait_s,
        max(value) FILTER (WHERE key = 'async/trainer_idle_ratio') AS trainer_idle_ratio,
        max(value) FILTER (WHERE key = 'async/rollout_idle_ratio') AS rollout_idle_ratio,
        max(value) FILTER (WHERE key = 'async/rollout_active_s') AS rollout_active_s,
        max(value) FILTER (WHERE key = 'async/rollout_window_s') AS rollout_window_s,
        max(value) FILTER (WHERE key = 'async/weight_sync_s') AS weight_sync_s,
        max(value) FILTER (WHERE key = 'async/queue_depth') AS queue_depth,
        max(value) FILTER (WHERE key = 'async/stale_dropped') AS stale_dropped,
        max(value) FILTER (WHERE key = 'async/stale_dropped_total') AS stale_dropped_total,
        max(value) FILTER (WHERE key = 'async/generated_total') AS generated_total
    FROM async_metrics
    GROUP BY step) AS named

-- view: async_pools
-- probed: yes
-- One row per step of $run_id that logged the trainer's wait or the rollout engines' idle: the two
-- pools of an async run, each waiting on the other. The trainer's wait is async/trainer_wait_s,
-- else its logged idle ratio x timing_s/step; the rollout engines' idle is their window between
-- two weight updates minus their active time, else their logged idle ratio x window. A ratio is
-- derived from seconds where both are logged, else taken as logged.
-- @column step INTEGER fmt=count  Training step (verl fully-async: weight version).
-- @column step_s DOUBLE fmt=s  The trainer's step time, timing_s/step (s).
-- @column trainer_wait_s DOUBLE fmt=s  The trainer waiting for samples (s).
-- @column trainer_idle_ratio DOUBLE fmt=pct  trainer_wait_s / step_s, else the logged ratio.
-- @column rollout_window_s DOUBLE fmt=s  The rollout engines' window between two weight updates (s).
-- @column rollout_active_s DOUBLE fmt=s  Of which generating (s).
-- @column rollout_idle_s DOUBLE fmt=s  Of which idle (s).
-- @column rollout_idle_ratio DOUBLE fmt=pct  rollout_idle_s / rollout_window_s, else the logged ratio.
-- @column weight_sync_s DOUBLE fmt=s  async/weight_sync_s: weight sync logged apart from the step's timer (s).
SELECT
    l.step,
    m.step_s,
    coalesce(l.trainer_wait_s, l.trainer_idle_ratio * m.step_s) AS trainer_wait_s,
    coalesce(l.trainer_wait_s / NULLIF(m.step_s, 0), l.trainer_idle_ratio) AS trainer_idle_ratio,
    l.rollout_window_s,
    l.rollout_active_s,
    coalesce(l.rollout_window_s - l.rollout_active_s, l.rollout_idle_ratio * l.rollout_window_s) AS rollout_idle_s,
    coalesce((l.rollout_window_s - l.rollout_active_s) / NULLIF(l.rollout_window_s, 0),
             l.rollout_idle_ratio) AS rollout_idle_ratio,
    l.weight_sync_s
FROM async_logged l
LEFT JOIN (
    SELECT step, max(value) AS step_s
    FROM canonical_metrics WHERE run_id = $run_id AND key = 'timing_s/step' GROUP BY step) AS m ON m.step = l.step
WHERE coalesce(l.trainer_wait_s, l.trainer_idle_ratio, l.rollout_idle_ratio, l.rollout_window_s) IS NOT NULL

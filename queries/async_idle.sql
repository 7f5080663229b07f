-- name: async_idle
-- title: Async: trainer and rollout idle per step
-- section: Async
-- stored: yes
-- The two pools of an async run, each waiting on the other: the trainer's share of its step spent
-- waiting for samples (rollout is the bottleneck), and the rollout engines' share of their window
-- between two weight updates spent generating nothing (queue full, paused for the sync: the
-- trainer or the staleness bound is), as the framework logged them (async_pools). Only async runs
-- have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step (verl fully-async: weight version).
-- @column step_s DOUBLE fmt=s  The trainer's step time, timing_s/step (s).
-- @column trainer_wait_s DOUBLE fmt=s  The trainer waiting for samples (s): async/trainer_wait_s, else the logged idle ratio x step_s.
-- @column trainer_idle_ratio DOUBLE fmt=pct  trainer_wait_s / step_s, else the framework's logged ratio.
-- @column rollout_window_s DOUBLE fmt=s  The rollout engines' window between two weight updates (s).
-- @column rollout_active_s DOUBLE fmt=s  Of which generating (s).
-- @column rollout_idle_s DOUBLE fmt=s  Of which idle (s): window - active, else the logged idle ratio x window.
-- @column rollout_idle_ratio DOUBLE fmt=pct  rollout_idle_s / rollout_window_s, else the framework's logged ratio.
-- @chart line x=step y=trainer_idle_ratio,rollout_idle_ratio xlabel="step" ylabel="share of the pool's time idle" title="Trainer waiting for samples, rollout engines idle"
SELECT step, step_s, trainer_wait_s, trainer_idle_ratio, rollout_window_s, rollout_active_s,
       rollout_idle_s, rollout_idle_ratio
FROM async_pools
ORDER BY step

-- name: rollout_busy
-- title: Rollout engine busy and idle time
-- section: Rollout tail
-- stored: yes
-- Per step, one bar per rollout engine (dp_rank): how long it was busy, then, shaded, how
-- long it waited for the step's slowest engine. Busy is the engine's measured rank_stage
-- 'gen' seconds when every engine of the step has them (basis 'seconds'), else its longest
-- response in tokens, the decode-bound proxy (basis 'tokens'): the same rule and the same
-- idle_frac as rollout_tail. Tall shaded segments are GPUs waiting on the long tail.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column dp_rank INTEGER fmt=count  Rollout engine (data-parallel rank).
-- @column basis VARCHAR  Unit of busy and idle: 'seconds' (measured gen time) or 'tokens' (longest response).
-- @column busy DOUBLE fmt=count  The engine's gen seconds, or its longest response in tokens (s or tokens).
-- @column idle DOUBLE fmt=count  The step's slowest engine's busy minus this engine's: time it sat waiting (s or tokens).
-- @column idle_frac DOUBLE fmt=pct  idle / the slowest engine's busy, as in rollout_tail.
-- @chart stacked x=step y=busy,idle group=dp_rank shade=idle xlabel="step (one bar per rollout engine, dp rank 0 first)" ylabel="gen time (s) or longest response (tokens)" title="Rollout engines per step: busy, then idle until the slowest (shaded)"
SELECT step, dp_rank, basis, busy, idle, idle_frac
FROM rollout_engines
ORDER BY step, dp_rank

-- name: rollout_busy
-- title: Rollout engine busy and idle time
-- section: Rollout tail
-- Per step, one bar per rollout engine (dp_rank): how long it was busy, then, shaded, how
-- long it waited for the step's slowest engine. Busy is the engine's measured rank_stage
-- 'gen' seconds when every engine of the step has them (basis 'seconds'), else its longest
-- response in tokens, the decode-bound proxy (basis 'tokens'): the same rule and the same
-- idle_frac as rollout_tail. Tall shaded segments are GPUs waiting on the long tail.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column dp_rank INTEGER  Rollout engine (data-parallel rank).
-- @column basis VARCHAR  Unit of busy and idle: 'seconds' (measured gen time) or 'tokens' (longest response).
-- @column busy DOUBLE  The engine's gen seconds, or its longest response in tokens (s or tokens).
-- @column idle DOUBLE  The step's slowest engine's busy minus this engine's: time it sat waiting (s or tokens).
-- @column idle_frac DOUBLE  idle / the slowest engine's busy, as in rollout_tail.
-- @chart stacked x=step y=busy,idle group=dp_rank shade=idle xlabel="step (one bar per rollout engine, dp rank 0 first)" ylabel="gen time (s) or longest response (tokens)" title="Rollout engines per step: busy, then idle until the slowest (shaded)"
WITH ranks AS (
    SELECT step, dp_rank, max_len, gen_s
    FROM step_rank_lengths
    WHERE run_id = $run_id AND dp_rank IS NOT NULL),
steps AS (
    SELECT step, count(gen_s) = count(*) AS timed, max(max_len) AS longest, max(gen_s) AS slowest
    FROM ranks
    GROUP BY step),
busy AS (
    SELECT
        r.step,
        r.dp_rank,
        CASE WHEN s.timed THEN 'seconds' ELSE 'tokens' END AS basis,
        CASE WHEN s.timed THEN r.gen_s ELSE r.max_len END::DOUBLE AS busy,
        CASE WHEN s.timed THEN s.slowest ELSE s.longest END::DOUBLE AS top
    FROM ranks r
    JOIN steps s USING (step))
SELECT step, dp_rank, basis, busy, top - busy AS idle, 1 - busy / NULLIF(top, 0) AS idle_frac
FROM busy
ORDER BY step, dp_rank

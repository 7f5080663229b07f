-- view: rollout_steps
-- One row per step of $run_id with rollout engines (samples with a dp_rank): how long the
-- step's slowest engine ran and the share of the rollout the engines sat idle waiting for it.
-- An engine's busy time is its measured rank_stage 'gen' seconds when every engine of the
-- step has them (basis 'seconds'), else its longest response in tokens, the decode-bound proxy
-- (basis 'tokens').
-- @column step INTEGER fmt=count  Training step.
-- @column engines BIGINT fmt=count  Rollout engines (dp ranks) with samples in the step.
-- @column basis VARCHAR  Unit of busy time: 'seconds' (measured gen time) or 'tokens' (longest response).
-- @column slowest DOUBLE fmt=count  Busy time of the step's slowest engine (s or tokens).
-- @column rollout_idle_frac DOUBLE fmt=pct  1 - sum(busy) / (engines * slowest): the share of the rollout the engines sat idle.
SELECT
    step,
    count(*) AS engines,
    CASE WHEN count(gen_s) = count(*) THEN 'seconds' ELSE 'tokens' END AS basis,
    CASE WHEN count(gen_s) = count(*) THEN max(gen_s) ELSE max(max_len) END::DOUBLE AS slowest,
    CASE WHEN count(gen_s) = count(*)
         THEN 1 - sum(gen_s)::DOUBLE / NULLIF(count(*) * max(gen_s), 0)
         ELSE 1 - sum(max_len)::DOUBLE / NULLIF(count(*) * max(max_len), 0)
    END AS rollout_idle_frac
FROM step_rank_lengths
WHERE run_id = $run_id AND dp_rank IS NOT NULL
GROUP BY step

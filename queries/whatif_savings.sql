-- name: whatif_savings
-- title: What if: GPU-hours each dispatch policy saves over the whole run
-- section: What if
-- The whole run under each simulated dispatch policy (`polytrace simulate RUN --store`, or
-- the run page's Simulate button): total predicted rollout time, the time and GPU-hours it
-- saves against as-recorded, and the speedup. Every GPU of the job waits for the rollout, so
-- a saved second counts on every GPU. length-balanced is an oracle bound: it knows every
-- response length before generation; predicted-balanced is what a scheduler could reach.
-- @param run_id VARCHAR  Run to analyse.
-- @param gpus INTEGER = NULL  GPUs in the job; default the run's n_gpus, else inferred from the logged ranks (as in whatif).
-- @column policy VARCHAR  Dispatch policy.
-- @column dispatch VARCHAR  The policy as charts name it: length-balanced is marked '(oracle bound)'.
-- @column steps BIGINT  Simulated steps.
-- @column rollout_s DOUBLE  Predicted rollout time summed over the steps (s).
-- @column saved_s DOUBLE  As-recorded total minus this policy's (s).
-- @column saved_frac DOUBLE  saved_s over the as-recorded total: share of rollout time saved.
-- @column speedup DOUBLE  As-recorded total / this policy's total.
-- @column gpus INTEGER  GPUs the savings count (as in whatif).
-- @column run_gpu_hours_saved DOUBLE  saved_s * gpus / 3600 (GPU-hours).
-- @chart table title="GPU-hours saved over the whole run, per dispatch policy"
WITH job AS (
    -- whatif's rule: the gpus parameter, the run's n_gpus, else run_ranks.gpus_from_ranks
    SELECT coalesce($gpus, (SELECT n_gpus FROM runs WHERE run_id = $run_id),
                    (SELECT gpus_from_ranks FROM run_ranks WHERE run_id = $run_id)) AS gpus
),
totals AS (
    SELECT
        w.policy,
        count(*) AS steps,
        sum(w.predicted_s)::DOUBLE AS rollout_s,
        sum(b.predicted_s)::DOUBLE AS recorded_s
    FROM whatif w
    JOIN whatif b ON b.run_id = w.run_id AND b.step = w.step AND b.policy = 'as-recorded'
        AND b.engine IS NULL
    WHERE w.run_id = $run_id AND w.engine IS NULL
    GROUP BY w.policy
)
SELECT
    t.policy,
    CASE WHEN t.policy = 'length-balanced' THEN 'length-balanced (oracle bound)' ELSE t.policy END
        AS dispatch,
    t.steps,
    t.rollout_s,
    t.recorded_s - t.rollout_s AS saved_s,
    1 - t.rollout_s / NULLIF(t.recorded_s, 0) AS saved_frac,
    t.recorded_s / NULLIF(t.rollout_s, 0) AS speedup,
    j.gpus::INTEGER AS gpus,
    (t.recorded_s - t.rollout_s) * j.gpus / 3600.0 AS run_gpu_hours_saved
FROM totals t, job j
ORDER BY run_gpu_hours_saved DESC, t.policy

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
-- @column steps BIGINT fmt=count  Simulated steps.
-- @column rollout_s DOUBLE fmt=s  Predicted rollout time summed over the steps (s).
-- @column saved_s DOUBLE fmt=s  As-recorded total minus this policy's (s).
-- @column saved_frac DOUBLE fmt=pct  saved_s over the as-recorded total: share of rollout time saved.
-- @column speedup DOUBLE fmt=x  As-recorded total / this policy's total.
-- @column gpus INTEGER fmt=count  GPUs the savings count (as in whatif).
-- @column run_gpu_hours_saved DOUBLE fmt=gpu_h  saved_s * gpus / 3600 (GPU-hours).
-- @chart table title="GPU-hours saved over the whole run, per dispatch policy"
WITH job AS (
    -- whatif's rule: the gpus parameter, else the run's own count (whatif_job)
    SELECT coalesce($gpus, gpus) AS gpus FROM whatif_job
)
SELECT
    p.policy,
    p.dispatch,
    p.steps,
    p.rollout_s,
    -- the difference of the totals, as this table has always shown it (whatif_policies.saved_s
    -- sums each step's saving: equal but for rounding when a policy saves next to nothing)
    p.recorded_s - p.rollout_s AS saved_s,
    1 - p.rollout_s / NULLIF(p.recorded_s, 0) AS saved_frac,
    p.speedup,
    j.gpus::INTEGER AS gpus,
    (p.recorded_s - p.rollout_s) * j.gpus / 3600.0 AS run_gpu_hours_saved
FROM whatif_policies p
CROSS JOIN job j
ORDER BY run_gpu_hours_saved DESC, p.policy

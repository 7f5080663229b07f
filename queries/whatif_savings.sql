-- name: whatif_savings
-- title: What if: GPU-hours each policy saves over the whole run
-- section: What if
-- stored: yes
-- The whole run under each simulated policy (`polytrace simulate RUN --store`, or the run
-- page's Simulate button): total predicted rollout time, the time and GPU-hours it saves
-- against as-recorded, and the speedup. Every GPU of the job waits for the rollout, so a saved
-- second counts on every GPU. Dispatches place the same samples otherwise: predicted-balanced
-- is what a scheduler could reach, length-balanced knows every length in advance (the bound of
-- the simulated dispatches when none saves more). Partial rollout changes the algorithm: it
-- counts its steady steps only, and says how many samples finish a step late and the tokens
-- carried over. A cap changes the config.
-- @param run_id VARCHAR  Run to analyse.
-- @param gpus INTEGER = NULL >= 1  GPUs in the job; default the run's n_gpus, else inferred from the logged ranks (as in whatif).
-- @column policy VARCHAR  Simulated policy.
-- @column family VARCHAR  dispatch (the same samples placed otherwise), algorithm (partial rollout) or config (a cap).
-- @column dispatch VARCHAR  The policy as charts name it, with what it assumes.
-- @column steps BIGINT fmt=count  Steps counted (partial rollout: its steady steps).
-- @column rollout_s DOUBLE fmt=s  Predicted rollout time summed over those steps (s).
-- @column saved_s DOUBLE fmt=s  As-recorded total minus this policy's over the same steps (s).
-- @column saved_frac DOUBLE fmt=pct  saved_s over the as-recorded total: share of rollout time saved.
-- @column speedup DOUBLE fmt=x  As-recorded total / this policy's total.
-- @column carried_share DOUBLE fmt=pct  Partial rollout: samples that finish a step after they started, over those generated.
-- @column carried_tokens DOUBLE fmt=tokens  Partial rollout: tokens carried into the next step, per step (tokens).
-- @column gpus INTEGER fmt=count  GPUs the savings count (as in whatif).
-- @column run_gpu_hours_saved DOUBLE fmt=gpu_h  saved_s * gpus / 3600 (GPU-hours).
-- @chart table title="GPU-hours saved over the whole run, per policy"
WITH job AS (
    -- whatif's rule: the gpus parameter, else the run's own count (whatif_job)
    SELECT coalesce($gpus, gpus) AS gpus FROM whatif_job
)
SELECT
    p.policy,
    p.family,
    p.dispatch,
    p.steps,
    p.rollout_s,
    -- the difference of the totals, as this table has always shown it (whatif_policies.saved_s
    -- sums each step's saving: equal but for rounding when a policy saves next to nothing)
    p.recorded_s - p.rollout_s AS saved_s,
    1 - p.rollout_s / NULLIF(p.recorded_s, 0) AS saved_frac,
    p.speedup,
    p.carried_share,
    p.carried_tokens,
    j.gpus::INTEGER AS gpus,
    (p.recorded_s - p.rollout_s) * j.gpus / 3600.0 AS run_gpu_hours_saved
FROM whatif_policies p
CROSS JOIN job j
ORDER BY CASE p.family WHEN 'dispatch' THEN 0 WHEN 'algorithm' THEN 1 ELSE 2 END,
         run_gpu_hours_saved DESC, p.policy

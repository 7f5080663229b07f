-- name: whatif
-- title: What if: rollout time under other policies
-- section: What if
-- stored: yes
-- Predicted rollout time per step under each simulated policy, from `polytrace simulate RUN
-- --store` (a decode-iteration cost model over the recorded lengths): dispatches place the
-- same samples otherwise (length-balanced knows every length in advance), partial rollout
-- changes the algorithm (samples cut at a step's cap finish in a later step), a cap changes
-- the config. saved_s and the GPU-hours compare each policy with as-recorded; all GPUs of the
-- job wait for the rollout, so a second saved is a second saved on every GPU.
-- @param run_id VARCHAR  Run to analyse.
-- @param gpus INTEGER = NULL >= 1  GPUs in the job; default the run's n_gpus, else inferred from the logged ranks.
-- @column step INTEGER fmt=count  Training step.
-- @column policy VARCHAR  Simulated policy.
-- @column predicted_s DOUBLE fmt=s  Predicted rollout time of the step: its slowest engine (s).
-- @column rollout_idle_frac DOUBLE fmt=pct  1 - sum(engine times) / (engines * slowest engine time).
-- @column speedup DOUBLE fmt=x  as-recorded rollout time / this policy's.
-- @column saved_s DOUBLE fmt=s  as-recorded rollout time - this policy's (s).
-- @column gpus INTEGER fmt=count  GPUs the savings count: the gpus parameter, the run's n_gpus, or max rank + rank stride (ranks are dp_rank * tp).
-- @column gpu_hours_saved DOUBLE fmt=gpu_h  saved_s * gpus / 3600 for the step (GPU-hours).
-- @column run_gpu_hours_saved DOUBLE fmt=gpu_h  The policy's saving over the run (whatif_policies: partial rollout over its steady steps) in GPU-hours.
-- @column dispatch VARCHAR  The policy as charts name it, with what it assumes (whatif_policies).
-- @chart line x=step y=predicted_s color=dispatch xlabel="step" ylabel="predicted rollout time (s)" title="Predicted rollout time per policy"
WITH job AS (
    -- the gpus parameter, else the run's own count (whatif_job)
    SELECT coalesce($gpus, gpus) AS gpus FROM whatif_job
)
SELECT
    s.step,
    s.policy,
    s.predicted_s,
    s.idle_frac AS rollout_idle_frac,
    s.speedup,
    s.saved_s,
    j.gpus::INTEGER AS gpus,
    s.saved_s * j.gpus / 3600.0 AS gpu_hours_saved,
    p.saved_s * j.gpus / 3600.0 AS run_gpu_hours_saved,
    p.dispatch
FROM whatif_steps s
JOIN whatif_policies p ON p.policy = s.policy
CROSS JOIN job j
ORDER BY s.step, s.policy

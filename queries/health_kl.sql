-- name: health_kl
-- title: KL per step
-- section: Training health
-- stored: yes
-- How far each update moves the policy: verl's actor/ppo_kl (against the policy that generated
-- the rollout) and actor/kl_loss (against the reference model, where the run uses it as a loss).
-- @param run_id VARCHAR  Run to examine.
-- @column step INTEGER fmt=count  Training step.
-- @column ppo_kl DOUBLE fmt=count  actor/ppo_kl.
-- @column kl_loss DOUBLE fmt=count  actor/kl_loss.
-- @chart line x=step y=ppo_kl,kl_loss xlabel="step" ylabel="KL" title="KL to the rollout and reference policies"
SELECT step, ppo_kl, kl_loss
FROM health_steps
WHERE ppo_kl IS NOT NULL OR kl_loss IS NOT NULL
ORDER BY step

-- name: health_grad_norm
-- title: Gradient norm per step
-- section: Training health
-- stored: yes
-- verl's actor/grad_norm before clipping, with the share of tokens whose PPO ratio was clipped
-- (actor/pg_clipfrac): spikes here come before many instabilities.
-- @param run_id VARCHAR  Run to examine.
-- @column step INTEGER fmt=count  Training step.
-- @column grad_norm DOUBLE fmt=count  actor/grad_norm.
-- @column pg_clipfrac DOUBLE fmt=pct  actor/pg_clipfrac.
-- @chart line x=step y=grad_norm xlabel="step" ylabel="gradient norm" title="Actor gradient norm"
SELECT step, grad_norm, pg_clipfrac
FROM health_steps
WHERE grad_norm IS NOT NULL
ORDER BY step

-- name: health_entropy
-- title: Policy entropy per step
-- section: Training health
-- stored: yes
-- verl's actor/entropy: the policy's mean token entropy. A fall to near 0 means the policy
-- has stopped exploring (it emits the same tokens every time).
-- @param run_id VARCHAR  Run to examine.
-- @column step INTEGER fmt=count  Training step.
-- @column entropy DOUBLE fmt=count  actor/entropy (nats).
-- @chart line x=step y=entropy xlabel="step" ylabel="entropy (nats)" title="Policy entropy"
SELECT step, entropy
FROM health_steps
WHERE entropy IS NOT NULL
ORDER BY step

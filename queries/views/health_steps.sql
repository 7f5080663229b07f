-- view: health_steps
-- One row per step of $run_id that logged one of the training-health metrics verl writes:
-- the score and reward the rollouts got, the policy's entropy, its distance from the old and
-- reference policies, and the gradient norm. Steps that logged none have no row.
-- @column step INTEGER fmt=count  Training step.
-- @column score_mean DOUBLE fmt=count  critic/score/mean: mean verifiable score of the step's responses.
-- @column reward_mean DOUBLE fmt=count  critic/rewards/mean: mean reward after penalties.
-- @column entropy DOUBLE fmt=count  actor/entropy: mean token entropy of the policy (nats).
-- @column ppo_kl DOUBLE fmt=count  actor/ppo_kl: KL between the policy and the rollout policy.
-- @column kl_loss DOUBLE fmt=count  actor/kl_loss: KL to the reference model, where it is a loss term.
-- @column grad_norm DOUBLE fmt=count  actor/grad_norm: the actor's gradient norm before clipping.
-- @column pg_clipfrac DOUBLE fmt=pct  actor/pg_clipfrac: share of tokens whose ratio was clipped.
SELECT
    step,
    max(CASE WHEN key = 'critic/score/mean' THEN value END) AS score_mean,
    max(CASE WHEN key = 'critic/rewards/mean' THEN value END) AS reward_mean,
    max(CASE WHEN key = 'actor/entropy' THEN value END) AS entropy,
    max(CASE WHEN key = 'actor/ppo_kl' THEN value END) AS ppo_kl,
    max(CASE WHEN key = 'actor/kl_loss' THEN value END) AS kl_loss,
    max(CASE WHEN key = 'actor/grad_norm' THEN value END) AS grad_norm,
    max(CASE WHEN key = 'actor/pg_clipfrac' THEN value END) AS pg_clipfrac
FROM canonical_metrics
WHERE run_id = $run_id
  AND key IN ('critic/score/mean', 'critic/rewards/mean', 'actor/entropy', 'actor/ppo_kl',
              'actor/kl_loss', 'actor/grad_norm', 'actor/pg_clipfrac')
GROUP BY step

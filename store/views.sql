-- Views over the canonical tables and the per-step aggregates (store/aggregates/), created after
-- both. Statements are idempotent, as in schema.sql.

-- The stage timings of each step, one column per canonical stage, in seconds: a wide view
-- over canonical_metrics for the stage queries, whatever framework logged them. A stage the
-- step did not log is NULL, never 0. Only steps with at least one of these timings
-- have a row (a validation-only step line has none).
CREATE OR REPLACE VIEW step_timings AS
SELECT
    run_id,
    step,
    max(value) FILTER (WHERE key = 'timing_s/gen')             AS gen_s,             -- rollout generation
    max(value) FILTER (WHERE key = 'timing_s/reward')          AS reward_s,          -- reward computation
    max(value) FILTER (WHERE key = 'timing_s/old_log_prob')    AS old_log_prob_s,    -- actor log-probs of the rollout
    max(value) FILTER (WHERE key = 'timing_s/ref')             AS ref_s,             -- reference-model log-probs
    max(value) FILTER (WHERE key = 'timing_s/values')          AS values_s,          -- critic values (PPO)
    max(value) FILTER (WHERE key = 'timing_s/adv')             AS adv_s,             -- advantage estimation
    max(value) FILTER (WHERE key = 'timing_s/update_critic')   AS update_critic_s,   -- critic training (PPO)
    max(value) FILTER (WHERE key = 'timing_s/update_actor')    AS update_actor_s,    -- actor training
    max(value) FILTER (WHERE key = 'timing_s/testing')         AS testing_s,         -- validation run inside the step
    max(value) FILTER (WHERE key = 'timing_s/save_checkpoint') AS save_checkpoint_s, -- checkpoint save inside the step
    max(value) FILTER (WHERE key = 'timing_s/step')            AS step_s             -- the whole step, wall time
FROM canonical_metrics
WHERE key IN ('timing_s/gen', 'timing_s/reward', 'timing_s/old_log_prob', 'timing_s/ref',
              'timing_s/values', 'timing_s/adv', 'timing_s/update_critic', 'timing_s/update_actor',
              'timing_s/testing', 'timing_s/save_checkpoint', 'timing_s/step')
GROUP BY run_id, step;

-- name: stage_breakdown
-- title: Step time by stage
-- section: Stages
-- stored: yes
-- Where each step's wall time goes, from verl's timing_s/* metrics: seconds and share of
-- timing_s/step for each stage. A stage the step did not log is NULL, never 0; `other` is
-- the step time no logged stage accounts for (step - sum of the logged stages; negative
-- when stages overlap). Steps without any stage timing (validation-only lines, lines cut
-- before their timings) are left out.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column step_s DOUBLE fmt=s  timing_s/step: wall time of the step (s).
-- @column gen_s DOUBLE fmt=s  Rollout generation (s).
-- @column reward_s DOUBLE fmt=s  Reward computation (s).
-- @column old_log_prob_s DOUBLE fmt=s  Actor log-probs of the rollout (s).
-- @column ref_s DOUBLE fmt=s  Reference-model log-probs (s).
-- @column values_s DOUBLE fmt=s  Critic values (s).
-- @column adv_s DOUBLE fmt=s  Advantage estimation (s).
-- @column update_critic_s DOUBLE fmt=s  Critic training (s).
-- @column update_actor_s DOUBLE fmt=s  Actor training (s).
-- @column checkpoint_s DOUBLE fmt=s  timing_s/save_checkpoint: saving a checkpoint inside the step (s).
-- @column validation_s DOUBLE fmt=s  timing_s/testing: validation inside the step (s).
-- @column other_s DOUBLE fmt=s  step_s minus the sum of the logged stages (s); NULL without step_s or without any stage.
-- @column gen_share DOUBLE fmt=pct  gen_s / step_s.
-- @column reward_share DOUBLE fmt=pct  reward_s / step_s.
-- @column old_log_prob_share DOUBLE fmt=pct  old_log_prob_s / step_s.
-- @column ref_share DOUBLE fmt=pct  ref_s / step_s.
-- @column values_share DOUBLE fmt=pct  values_s / step_s.
-- @column adv_share DOUBLE fmt=pct  adv_s / step_s.
-- @column update_critic_share DOUBLE fmt=pct  update_critic_s / step_s.
-- @column update_actor_share DOUBLE fmt=pct  update_actor_s / step_s.
-- @column checkpoint_share DOUBLE fmt=pct  checkpoint_s / step_s.
-- @column validation_share DOUBLE fmt=pct  validation_s / step_s.
-- @column other_share DOUBLE fmt=pct  other_s / step_s.
-- @chart stacked x=step y=gen_s,reward_s,old_log_prob_s,ref_s,values_s,adv_s,update_critic_s,update_actor_s,checkpoint_s,validation_s,other_s xlabel="step" ylabel="time (s)" title="Step time by stage"
WITH t AS (
    SELECT
        *,
        save_checkpoint_s AS checkpoint_s,
        testing_s AS validation_s,
        CASE WHEN coalesce(gen_s, reward_s, old_log_prob_s, ref_s, values_s, adv_s,
                           update_critic_s, update_actor_s, save_checkpoint_s, testing_s) IS NOT NULL
             THEN coalesce(gen_s, 0) + coalesce(reward_s, 0) + coalesce(old_log_prob_s, 0)
                + coalesce(ref_s, 0) + coalesce(values_s, 0) + coalesce(adv_s, 0)
                + coalesce(update_critic_s, 0) + coalesce(update_actor_s, 0)
                + coalesce(save_checkpoint_s, 0) + coalesce(testing_s, 0)
        END AS staged_s
    FROM step_timings
    WHERE run_id = $run_id
), o AS (
    SELECT *, step_s - staged_s AS other_s FROM t
)
SELECT
    step,
    step_s,
    gen_s,
    reward_s,
    old_log_prob_s,
    ref_s,
    values_s,
    adv_s,
    update_critic_s,
    update_actor_s,
    checkpoint_s,
    validation_s,
    other_s,
    gen_s / NULLIF(step_s, 0) AS gen_share,
    reward_s / NULLIF(step_s, 0) AS reward_share,
    old_log_prob_s / NULLIF(step_s, 0) AS old_log_prob_share,
    ref_s / NULLIF(step_s, 0) AS ref_share,
    values_s / NULLIF(step_s, 0) AS values_share,
    adv_s / NULLIF(step_s, 0) AS adv_share,
    update_critic_s / NULLIF(step_s, 0) AS update_critic_share,
    update_actor_s / NULLIF(step_s, 0) AS update_actor_share,
    checkpoint_s / NULLIF(step_s, 0) AS checkpoint_share,
    validation_s / NULLIF(step_s, 0) AS validation_share,
    other_s / NULLIF(step_s, 0) AS other_share
FROM o
WHERE coalesce(step_s, staged_s) IS NOT NULL
ORDER BY step

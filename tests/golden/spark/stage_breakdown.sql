WITH t AS (
  SELECT
    *,
    CASE
      WHEN NOT COALESCE(gen_s, reward_s, old_log_prob_s, ref_s, values_s, adv_s, update_critic_s, update_actor_s) IS NULL
      THEN COALESCE(gen_s, 0) + COALESCE(reward_s, 0) + COALESCE(old_log_prob_s, 0) + COALESCE(ref_s, 0) + COALESCE(values_s, 0) + COALESCE(adv_s, 0) + COALESCE(update_critic_s, 0) + COALESCE(update_actor_s, 0)
    END AS staged_s
  FROM step_timings
  WHERE
    run_id = :run_id
), o AS (
  SELECT
    *,
    step_s - staged_s AS other_s
  FROM t
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
  other_s,
  gen_s / NULLIF(step_s, 0) AS gen_share,
  reward_s / NULLIF(step_s, 0) AS reward_share,
  old_log_prob_s / NULLIF(step_s, 0) AS old_log_prob_share,
  ref_s / NULLIF(step_s, 0) AS ref_share,
  values_s / NULLIF(step_s, 0) AS values_share,
  adv_s / NULLIF(step_s, 0) AS adv_share,
  update_critic_s / NULLIF(step_s, 0) AS update_critic_share,
  update_actor_s / NULLIF(step_s, 0) AS update_actor_share,
  other_s / NULLIF(step_s, 0) AS other_share
FROM o
WHERE
  NOT COALESCE(step_s, staged_s) IS NULL
ORDER BY
  step NULLS LAST

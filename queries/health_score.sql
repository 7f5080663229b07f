-- name: health_score
-- title: Score and reward per step
-- section: Training health
-- stored: yes
-- verl's mean verifiable score of each step's responses (critic/score/mean) and the reward
-- after penalties (critic/rewards/mean): what the run is optimising.
-- @param run_id VARCHAR  Run to examine.
-- @column step INTEGER fmt=count  Training step.
-- @column score_mean DOUBLE fmt=count  critic/score/mean.
-- @column reward_mean DOUBLE fmt=count  critic/rewards/mean.
-- @chart line x=step y=score_mean,reward_mean xlabel="step" ylabel="score / reward" title="Score and reward"
SELECT step, score_mean, reward_mean
FROM health_steps
WHERE score_mean IS NOT NULL OR reward_mean IS NOT NULL
ORDER BY step

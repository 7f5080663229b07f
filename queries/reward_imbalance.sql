-- name: reward_imbalance
-- title: Reward time imbalance
-- section: Imbalance
-- stored: yes
-- Per step, reward (verifier or sandbox) seconds on the slowest rank over the mean rank, from
-- rank_stage rows with stage 'reward'. Every rank waits for the slowest before training, and
-- tokens_corr says whether longer responses explain the slow rank.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column ranks BIGINT fmt=count  Ranks that logged a reward time.
-- @column max_s DOUBLE fmt=s  Slowest rank's reward time (s).
-- @column mean_s DOUBLE fmt=s  Mean reward time per rank (s).
-- @column imbalance DOUBLE fmt=x  max_s / mean_s (1 = even).
-- @column slowest_rank INTEGER fmt=count  Global rank with the longest reward time (lowest on a tie).
-- @column tokens_corr DOUBLE fmt=count  Pearson correlation over ranks of seconds with response tokens (rank_stage.tokens, else the dp_rank's sum of response_len).
-- @chart line x=step y=max_s,mean_s xlabel="step" ylabel="reward time per rank (s)" title="Reward time: slowest vs mean rank"
SELECT step, ranks, max_s, mean_s, imbalance, slowest_rank, tokens_corr
FROM reward_steps
ORDER BY step

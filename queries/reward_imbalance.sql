-- name: reward_imbalance
-- title: Reward time imbalance
-- section: Imbalance
-- Per step, reward (verifier or sandbox) seconds on the slowest rank over the mean rank, from
-- rank_stage rows with stage 'reward'. Every rank waits for the slowest before training, and
-- tokens_corr says whether longer responses explain the slow rank.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column ranks BIGINT  Ranks that logged a reward time.
-- @column max_s DOUBLE  Slowest rank's reward time (s).
-- @column mean_s DOUBLE  Mean reward time per rank (s).
-- @column imbalance DOUBLE  max_s / mean_s (1 = even).
-- @column slowest_rank INTEGER  Global rank with the longest reward time (lowest on a tie).
-- @column tokens_corr DOUBLE  Pearson correlation over ranks of seconds with response tokens (rank_stage.tokens, else the dp_rank's sum of response_len).
-- @chart line x=step y=max_s,mean_s xlabel="step" ylabel="reward time per rank (s)" title="Reward time: slowest vs mean rank"
WITH reward AS (
    SELECT
        k.step,
        k.rank,
        k.seconds,
        coalesce(k.tokens, l.response_tokens) AS tokens
    FROM rank_stage k
    LEFT JOIN step_rank_lengths l
        ON l.run_id = k.run_id AND l.step = k.step AND l.dp_rank = k.dp_rank
    WHERE k.run_id = $run_id AND k.stage = 'reward')
SELECT
    step,
    count(*) AS ranks,
    max(seconds) AS max_s,
    avg(seconds) AS mean_s,
    max(seconds) / NULLIF(avg(seconds), 0) AS imbalance,
    first(rank ORDER BY seconds DESC, rank) AS slowest_rank,
    corr(seconds, tokens) AS tokens_corr
FROM reward
GROUP BY step
ORDER BY step

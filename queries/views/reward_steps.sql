-- view: reward_steps
-- One row per step of $run_id with reward (verifier or sandbox) times: the slowest rank's
-- seconds against the mean rank's, from rank_stage rows with stage 'reward', and whether the
-- rank's response tokens explain them.
-- @column step INTEGER fmt=count  Training step.
-- @column ranks BIGINT fmt=count  Ranks that logged a reward time.
-- @column max_s DOUBLE fmt=s  Slowest rank's reward time (s).
-- @column mean_s DOUBLE fmt=s  Mean reward time per rank (s).
-- @column imbalance DOUBLE fmt=x  max_s / mean_s (1 = even).
-- @column slowest_rank INTEGER fmt=count  Global rank with the longest reward time (lowest on a tie).
-- @column tokens_corr DOUBLE fmt=count  Pearson correlation over ranks of seconds with response tokens (rank_stage.tokens, else the dp_rank's sum of response_len).
SELECT
    step,
    count(*) AS ranks,
    max(seconds) AS max_s,
    avg(seconds) AS mean_s,
    max(seconds) / NULLIF(avg(seconds), 0) AS imbalance,
    first(rank ORDER BY seconds DESC, rank) AS slowest_rank,
    corr(seconds, tokens) AS tokens_corr
FROM (
    SELECT k.step, k.rank, k.seconds, coalesce(k.tokens, l.response_tokens) AS tokens
    FROM rank_stage k
    LEFT JOIN step_rank_lengths l
        ON l.run_id = k.run_id AND l.step = k.step AND l.dp_rank = k.dp_rank
    WHERE k.run_id = $run_id AND k.stage = 'reward') AS reward
GROUP BY step

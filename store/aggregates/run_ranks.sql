-- One row per run whose samples name their global rank: the job's size as the ranks show it.
-- @column run_id VARCHAR  Owning run.
-- @column ranks BIGINT  Distinct global ranks that logged samples.
-- @column min_rank INTEGER  Lowest logged rank.
-- @column max_rank INTEGER  Highest logged rank.
-- @column gpus_from_ranks BIGINT  max_rank + rank stride (ranks are dp_rank * tp); NULL with one rank.
CREATE TABLE run_ranks AS
SELECT
    run_id,
    count(DISTINCT rank) AS ranks,
    min(rank) AS min_rank,
    max(rank) AS max_rank,
    -- packed logs name ranks dp_rank * tp with tp_rank 0: the stride between ranks is tp
    max(rank) + (max(rank) - min(rank)) // NULLIF(count(DISTINCT rank) - 1, 0) AS gpus_from_ranks
FROM samples
WHERE run_id = $run_id AND rank IS NOT NULL
GROUP BY run_id

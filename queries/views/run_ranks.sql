-- view: run_ranks
-- The job's size as $run_id's logged ranks show it (step_ranks): one row when any sample names
-- its global rank. Packed logs name ranks dp_rank * tp with tp_rank 0, so the stride between
-- ranks is tp and the last rank plus the stride is the GPU count.
-- @column ranks BIGINT fmt=count  Distinct global ranks that logged samples.
-- @column min_rank INTEGER fmt=count  Lowest logged rank.
-- @column max_rank INTEGER fmt=count  Highest logged rank.
-- @column gpus_from_ranks BIGINT fmt=count  max_rank + rank stride; NULL with one rank.
SELECT
    count(DISTINCT rank) AS ranks,
    min(rank) AS min_rank,
    max(rank) AS max_rank,
    max(rank) + (max(rank) - min(rank)) // NULLIF(count(DISTINCT rank) - 1, 0) AS gpus_from_ranks
FROM step_ranks
WHERE run_id = $run_id
HAVING count(*) > 0

-- name: async_lifecycle
-- title: Async: trajectories by outcome, and where their time went
-- section: Async
-- stored: yes
-- Every trajectory of the run by what became of it (accepted, dropped as too stale, filtered,
-- failed) and the source's reason: how many, their tokens, and the mean seconds of each leg where
-- the source logged timestamps (AReaL's session tracer: submit, generate phases, finalized):
-- waiting to start, generating, and from finished to the trainer. Rows with no step count too.
-- @param run_id VARCHAR  Run to analyse.
-- @column status VARCHAR  accepted, dropped_stale, filtered or failed.
-- @column reason VARCHAR  The source's reason, as written; NULL when none.
-- @column trajectories BIGINT fmt=count  Trajectories with this outcome.
-- @column share DOUBLE fmt=pct  Their share of the run's trajectories.
-- @column tokens BIGINT fmt=tokens  Their response tokens, where logged.
-- @column wait_s_mean DOUBLE fmt=s  Mean time from submitted to generation start (s).
-- @column gen_s_mean DOUBLE fmt=s  Mean time from generation start to its last token (s).
-- @column gen_s_p90 DOUBLE fmt=s  90th percentile of that (s).
-- @column to_trainer_s_mean DOUBLE fmt=s  Mean time from finished (ready, else last token) to taken by the trainer (s); NULL when consumption is not timed.
-- @chart table title="Trajectories by outcome"
SELECT
    status,
    reason,
    count(*) AS trajectories,
    count(*) / NULLIF(sum(count(*)) OVER ()::DOUBLE, 0) AS share,
    sum(tokens)::BIGINT AS tokens,
    avg(gen_start_ts - enqueue_ts) AS wait_s_mean,
    avg(gen_end_ts - gen_start_ts) AS gen_s_mean,
    quantile_cont(gen_end_ts - gen_start_ts, 0.9) AS gen_s_p90,
    avg(consume_ts - coalesce(ready_ts, gen_end_ts)) AS to_trainer_s_mean
FROM trajectories
WHERE run_id = $run_id
GROUP BY status, reason
ORDER BY trajectories DESC, status, reason NULLS FIRST

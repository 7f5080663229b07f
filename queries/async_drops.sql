-- name: async_drops
-- title: Async: trajectories dropped, by reason
-- section: Async
-- stored: yes
-- What each step generated and did not train on: dropped as too stale, rejected by a filter, or
-- failed, with the stale share of the step's trajectories and of its response tokens (GPU time
-- spent for nothing). Per-trajectory rows give every status; a logged step gives only stale drops
-- and generated samples (the differences of the framework's running totals). Only steps with a
-- drop count or trajectories have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column basis VARCHAR  'per-sample' (trajectories) or 'logged'.
-- @column generated BIGINT fmt=count  Trajectories (logged: samples) of the step, every status.
-- @column dropped_stale BIGINT fmt=count  Dropped as too stale.
-- @column filtered BIGINT fmt=count  Rejected by a filter (per-sample).
-- @column failed BIGINT fmt=count  Failed or aborted (per-sample).
-- @column stale_share DOUBLE fmt=pct  dropped_stale / generated.
-- @column stale_tokens BIGINT fmt=tokens  Response tokens of the stale drops (per-sample).
-- @column stale_token_share DOUBLE fmt=pct  stale_tokens / the step's response tokens (per-sample).
-- @chart stacked x=step y=dropped_stale,filtered,failed xlabel="step" ylabel="trajectories" title="Trajectories dropped, by reason"
SELECT
    s.step,
    CASE WHEN t.step IS NOT NULL THEN 'per-sample' ELSE 'logged' END AS basis,
    s.generated,
    s.dropped_stale,
    t.filtered,
    t.failed,
    s.dropped_stale / NULLIF(s.generated, 0) AS stale_share,
    s.stale_tokens,
    s.stale_tokens / NULLIF(s.tokens, 0) AS stale_token_share
FROM staleness_steps s
LEFT JOIN (
    SELECT step,
           count(*) FILTER (WHERE status = 'filtered') AS filtered,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM trajectories WHERE run_id = $run_id AND step IS NOT NULL GROUP BY step) AS t ON t.step = s.step
WHERE s.generated IS NOT NULL OR s.dropped_stale IS NOT NULL
ORDER BY s.step

-- name: rollout_tail
-- title: Rollout engine idling
-- section: Rollout tail
-- Per step and rollout engine (dp_rank), how long the engine's rollout ran against the
-- step's slowest engine: every engine waits for the longest response in the step, so
-- idle_frac is the share of the rollout an engine sat idle. Decode-bound proxy from lengths
-- (basis 'tokens'); when every engine of a step has measured rank_stage 'gen' seconds,
-- those are used instead (basis 'seconds'). Samples without a dp_rank are left out.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column dp_rank INTEGER  Rollout engine (data-parallel rank).
-- @column n BIGINT  Responses the engine generated.
-- @column tokens BIGINT  sum(response_len) over them (tokens).
-- @column max_len INTEGER  Longest response on the engine (tokens).
-- @column gen_s DOUBLE  Measured rollout time of the engine (s); NULL when not measured.
-- @column basis VARCHAR  What the idle fractions compare: 'seconds' (measured) or 'tokens' (max_len).
-- @column idle_frac DOUBLE  1 - busy / max(busy over the step's engines), busy = gen_s or max_len.
-- @column slot_util DOUBLE  tokens / (n * max_len): share of the engine's batch slots doing useful decode.
-- @column rollout_idle_frac DOUBLE  The step's 1 - sum(busy) / (engines * max busy), repeated on each row.
-- @chart heatmap x=step y=dp_rank z=idle_frac xlabel="step" ylabel="rollout engine (dp rank)" title="Idle fraction of each rollout engine"
WITH ranks AS (
    SELECT step, dp_rank, n, response_tokens AS tokens, max_len, gen_s
    FROM step_rank_lengths
    WHERE run_id = $run_id AND dp_rank IS NOT NULL),
steps AS (
    SELECT
        step,
        count(gen_s) = count(*) AS timed,
        count(*) AS engines,
        max(max_len) AS longest,
        sum(max_len)::DOUBLE AS sum_len,
        max(gen_s) AS slowest,
        sum(gen_s)::DOUBLE AS sum_s
    FROM ranks
    GROUP BY step)
SELECT
    r.step,
    r.dp_rank,
    r.n,
    r.tokens,
    r.max_len,
    r.gen_s,
    CASE WHEN s.timed THEN 'seconds' ELSE 'tokens' END AS basis,
    CASE WHEN s.timed THEN 1 - r.gen_s / NULLIF(s.slowest, 0)
         ELSE 1 - r.max_len / NULLIF(s.longest, 0) END AS idle_frac,
    r.tokens / NULLIF(r.n * r.max_len, 0) AS slot_util,
    CASE WHEN s.timed THEN 1 - s.sum_s / NULLIF(s.engines * s.slowest, 0)
         ELSE 1 - s.sum_len / NULLIF(s.engines * s.longest, 0) END AS rollout_idle_frac
FROM ranks r
JOIN steps s USING (step)
ORDER BY r.step, r.dp_rank

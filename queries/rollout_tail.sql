-- name: rollout_tail
-- title: Rollout engine idling
-- section: Rollout tail
-- stored: yes
-- Per step and rollout engine (dp_rank), how long the engine's rollout ran against the
-- step's slowest engine: every engine waits for the longest response in the step, so
-- idle_frac is the share of the rollout an engine sat idle. Decode-bound proxy from lengths
-- (basis 'tokens'); when every engine of a step has measured rank_stage 'gen' seconds,
-- those are used instead (basis 'seconds'). Samples without a dp_rank are left out.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column dp_rank INTEGER fmt=count  Rollout engine (data-parallel rank).
-- @column n BIGINT fmt=count  Responses the engine generated.
-- @column tokens BIGINT fmt=tokens  sum(response_len) over them (tokens).
-- @column max_len INTEGER fmt=tokens  Longest response on the engine (tokens).
-- @column gen_s DOUBLE fmt=s  Measured rollout time of the engine (s); NULL when not measured.
-- @column basis VARCHAR  What the idle fractions compare: 'seconds' (measured) or 'tokens' (max_len).
-- @column idle_frac DOUBLE fmt=pct  1 - busy / max(busy over the step's engines), busy = gen_s or max_len.
-- @column slot_util DOUBLE fmt=pct  tokens / (n * max_len): share of the engine's batch slots doing useful decode.
-- @column rollout_idle_frac DOUBLE fmt=pct  The step's 1 - sum(busy) / (engines * max busy), repeated on each row.
-- @chart heatmap x=step y=dp_rank z=idle_frac xlabel="step" ylabel="rollout engine (dp rank)" title="Idle fraction of each rollout engine"
SELECT step, dp_rank, n, tokens, max_len, gen_s, basis, idle_frac,
       tokens / NULLIF(n * max_len, 0) AS slot_util, rollout_idle_frac
FROM rollout_engines
ORDER BY step, dp_rank

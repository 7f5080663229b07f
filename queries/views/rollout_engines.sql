-- view: rollout_engines
-- One row per step and rollout engine (dp_rank) of $run_id: the work the engine did, how long
-- it was busy and how long it then waited for the step's slowest engine (rollout_steps says
-- whether busy is measured seconds or the longest response in tokens).
-- @column step INTEGER fmt=count  Training step.
-- @column dp_rank INTEGER fmt=count  Rollout engine (data-parallel rank).
-- @column n BIGINT fmt=count  Responses the engine generated.
-- @column tokens BIGINT fmt=tokens  sum(response_len) over them (tokens).
-- @column max_len INTEGER fmt=tokens  Longest response on the engine (tokens).
-- @column gen_s DOUBLE fmt=s  Measured rollout time of the engine (s); NULL when not measured.
-- @column basis VARCHAR  Unit of busy and idle: 'seconds' or 'tokens' (as rollout_steps).
-- @column busy DOUBLE fmt=count  gen_s, or max_len, by the step's basis (s or tokens).
-- @column idle DOUBLE fmt=count  The slowest engine's busy minus this engine's: time it sat waiting (s or tokens).
-- @column idle_frac DOUBLE fmt=pct  idle over the slowest engine's busy.
-- @column rollout_idle_frac DOUBLE fmt=pct  The step's idle share (rollout_steps), repeated on each engine.
SELECT
    step,
    dp_rank,
    n,
    tokens,
    max_len,
    gen_s,
    basis,
    busy,
    slowest - busy AS idle,
    1 - busy / NULLIF(slowest, 0) AS idle_frac,
    rollout_idle_frac
FROM (
    SELECT
        r.step,
        r.dp_rank,
        r.n,
        r.response_tokens AS tokens,
        r.max_len,
        r.gen_s,
        s.basis,
        CASE WHEN s.basis = 'seconds' THEN r.gen_s ELSE r.max_len END::DOUBLE AS busy,
        s.slowest,
        s.rollout_idle_frac
    FROM step_rank_lengths r
    JOIN rollout_steps s ON s.step = r.step
    WHERE r.run_id = $run_id AND r.dp_rank IS NOT NULL) AS engines

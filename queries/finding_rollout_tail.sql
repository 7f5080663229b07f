-- name: finding_rollout_tail
-- title: Finding: rollout engines idle on the long tail
-- section: Findings
-- stored: yes
-- Mean over steps of rollout_tail's rollout_idle_frac (measured engine times where every engine
-- of a step has them, else the decode-bound proxy from lengths), with the worst step, and how
-- far the longest response stands above the median one (length_stats' tail_ratio): a response
-- decodes one token after another, so no placement of the same samples makes a rollout
-- shorter than its longest response. Emitted at 10% or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  rollout_tail.
-- @column severity VARCHAR  warn at 20% or more, else info.
-- @column value DOUBLE fmt=pct  Mean share of each rollout that engines sat idle.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The worst step.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-engine idle fractions.
-- @chart table
WITH steps AS (
    SELECT
        r.step,
        r.basis = 'seconds' AS timed,
        r.rollout_idle_frac AS idle,
        l.response_max / NULLIF(l.response_p50, 0) AS tail_ratio
    FROM rollout_steps r
    LEFT JOIN step_lengths l ON l.run_id = $run_id AND l.step = r.step
    WHERE r.engines > 1),
summary AS (
    SELECT
        avg(idle) AS idle,
        max(idle) AS worst,
        first(step ORDER BY idle DESC, step) AS worst_step,
        avg(tail_ratio) AS tail_ratio,
        bool_and(timed) AS timed
    FROM steps)
SELECT
    'rollout_tail' AS kind,
    CASE WHEN idle >= 0.2 THEN 'warn' ELSE 'info' END AS severity,
    idle AS value,
    'share' AS unit,
    [worst_step] AS steps,
    'gen' AS stage,
    printf('Rollout engines sat idle %.0f%% of each rollout on average%s (worst: step %d, %.0f%%), '
           'waiting for each step''s longest response, %.1f× the median one on average: a response '
           'decodes one token after another, so no placement of the same samples ends a rollout '
           'before its longest response is done; partial rollout or a lower response cap shortens '
           'the tail.',
           100 * idle, CASE WHEN timed THEN '' ELSE ' by response lengths' END, worst_step,
           100 * worst, tail_ratio)
        AS text,
    '/api/queries/rollout_tail?run_id=' || $run_id AS evidence
FROM summary
WHERE idle >= 0.1

-- name: finding_step_time_spike
-- title: Finding: step-time spikes
-- section: Findings
-- stored: yes
-- Steps whose timing_s/step exceeds twice the median of the up to 20 steps before them (at
-- least 5 before): how many, which, how many times a normal step they took (mean of step time
-- over that median), every stage whose time grew against its own median on those steps by 10%
-- or more of their extra time (at most three, in seconds a spike), the interval when they
-- recur (from three spikes, the gap between spikes that 80% or more of the gaps share, with the
-- spikes off it named as exceptions), and the run time they cost (each spike's step time minus
-- its median).
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  step_time_spike.
-- @column severity VARCHAR  warn; info when they cost under 1% of the run's step time.
-- @column value DOUBLE fmt=count  Spiking steps.
-- @column unit VARCHAR  steps.
-- @column steps INTEGER[]  The spiking steps.
-- @column stage VARCHAR  The stage whose time grew most on those steps (e.g. save_checkpoint); the text names every stage that grew.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step stage times.
-- @chart table
WITH timed AS (
    SELECT step, value AS step_s
    FROM canonical_metrics
    WHERE run_id = $run_id AND key = 'timing_s/step' AND NOT isnan(value)),
judged AS (
    SELECT
        step, step_s,
        median(step_s) OVER (ORDER BY step ROWS BETWEEN 20 PRECEDING AND 1 PRECEDING) AS usual_s,
        count(*) OVER (ORDER BY step ROWS BETWEEN 20 PRECEDING AND 1 PRECEDING) AS before
    FROM timed),
spikes AS (
    SELECT step, step_s, usual_s,
           step - lag(step) OVER (ORDER BY step) AS gap_before,
           lead(step) OVER (ORDER BY step) - step AS gap_after
    FROM judged WHERE before >= 5 AND step_s > 2 * usual_s),
stages AS (
    -- every stage on every timed step, 0 where the step did not log it (a checkpoint stage
    -- exists only on checkpoint steps)
    SELECT t.step, k.key, coalesce(m.value, 0) AS seconds
    FROM timed t
    CROSS JOIN (SELECT DISTINCT key FROM canonical_metrics
                WHERE run_id = $run_id AND key LIKE 'timing_s/%' AND key != 'timing_s/step'
                  AND key NOT LIKE 'timing_s/agent_loop/%') k
    LEFT JOIN canonical_metrics m ON m.run_id = $run_id AND m.step = t.step AND m.key = k.key),
stage_growth AS (
    SELECT replace(key, 'timing_s/', '') AS stage, sum(seconds - usual)::DOUBLE AS grew_s
    FROM (SELECT step, key, seconds,
                 median(seconds) OVER (PARTITION BY key ORDER BY step
                                       ROWS BETWEEN 20 PRECEDING AND 1 PRECEDING) AS usual
          FROM stages)
    WHERE step IN (SELECT step FROM spikes)
    GROUP BY key),
common_gap AS (
    SELECT gap_before AS gap, count(*) AS k
    FROM spikes WHERE gap_before IS NOT NULL
    GROUP BY gap_before ORDER BY k DESC, gap_before LIMIT 1),
summary AS (
    SELECT
        count(*) AS n,
        list(step ORDER BY step) AS steps,
        sum(step_s - usual_s)::DOUBLE AS cost_s,
        avg(step_s / NULLIF(usual_s, 0)) AS ratio,
        (SELECT sum(step_s)::DOUBLE FROM timed) AS run_s
    FROM spikes),
off_period AS (
    -- the spikes neither of whose gaps is the common one, numbered
    SELECT p.step, row_number() OVER (ORDER BY p.step) AS r
    FROM spikes p CROSS JOIN common_gap g
    WHERE p.gap_before IS DISTINCT FROM g.gap AND p.gap_after IS DISTINCT FROM g.gap),
period AS (
    SELECT
        g.gap AS period,
        (SELECT count(*) FROM off_period) AS n_off,
        (SELECT list(step ORDER BY step) FROM off_period WHERE r <= 3) AS off
    FROM common_gap g
    CROSS JOIN summary s
    WHERE s.n >= 3 AND g.k >= 0.8 * (s.n - 1)),
stage_ranked AS (
    -- the stages that carry 10% or more of the spikes' extra time, largest first
    SELECT g.stage, g.grew_s / NULLIF(s.n, 0) AS per_spike,
           row_number() OVER (ORDER BY g.grew_s DESC, g.stage) AS r
    FROM stage_growth g
    CROSS JOIN summary s
    WHERE g.grew_s > 0 AND g.grew_s >= 0.1 * s.cost_s),
grown AS (
    SELECT
        first(stage ORDER BY r) AS top,
        array_to_string(list(printf('%s (+%.1f s a spike)', stage, per_spike) ORDER BY r)
                        FILTER (WHERE r <= 3), ' and ') AS said,
        bool_or(stage = 'save_checkpoint') AS checkpoint,
        bool_or(stage = 'testing') AS validation
    FROM stage_ranked)
SELECT
    'step_time_spike' AS kind,
    CASE WHEN s.cost_s < 0.01 * s.run_s THEN 'info' ELSE 'warn' END AS severity,
    s.n::DOUBLE AS value,
    'steps' AS unit,
    s.steps,
    g.top AS stage,
    printf('%d step%s took over twice the median of the steps before %s (%s%s), %.1f× a normal step%s, '
           'costing %s of run time (%.1f%%)%s.',
           s.n, CASE WHEN s.n = 1 THEN '' ELSE 's' END, CASE WHEN s.n = 1 THEN 'it' ELSE 'them' END,
           CASE WHEN s.n <= 6 THEN 'step' || CASE WHEN s.n = 1 THEN ' ' ELSE 's ' END
                                   || array_to_string(s.steps, ', ')
                ELSE printf('steps %d, %d, ... %d', s.steps[1], s.steps[2], s.steps[s.n]) END,
           CASE WHEN p.period IS NULL THEN ''
                WHEN p.n_off = 0 THEN printf(': every %d steps', p.period)
                ELSE printf(': every %d steps, plus step%s %s%s', p.period,
                            CASE WHEN p.n_off = 1 THEN '' ELSE 's' END, array_to_string(p.off, ', '),
                            CASE WHEN p.n_off > 3 THEN printf(' and %d more', p.n_off - 3) ELSE '' END)
                END,
           s.ratio, CASE WHEN s.n = 1 THEN '' ELSE ' on average' END,
           CASE WHEN s.cost_s >= 3600 THEN printf('%.1f h', s.cost_s / 3600)
                WHEN s.cost_s >= 60 THEN printf('%.1f min', s.cost_s / 60)
                ELSE printf('%.0f s', s.cost_s) END,
           100 * s.cost_s / NULLIF(s.run_s, 0),
           CASE WHEN g.said IS NULL OR g.said = '' THEN ''
                ELSE printf('; the extra time was in %s%s', g.said,
                            CASE WHEN g.checkpoint AND g.validation
                                 THEN ': save checkpoints less often or asynchronously, and validate less often'
                                 WHEN g.checkpoint THEN ': save checkpoints less often or asynchronously'
                                 WHEN g.validation THEN ': validate less often'
                                 ELSE '' END) END) AS text,
    '/api/queries/stage_breakdown?run_id=' || $run_id AS evidence
FROM summary s
LEFT JOIN period p ON true
LEFT JOIN grown g ON true
WHERE s.n > 0

-- name: finding_step_time_spike
-- title: Finding: step-time spikes
-- section: Findings
-- stored: yes
-- Steps whose timing_s/step exceeds twice the median of the up to 20 steps before them (at
-- least 5 before): how many, which, the stage whose time grew most against its own median on
-- those steps, the interval when they recur evenly, and the run time they cost (each spike's
-- step time minus its median).
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  step_time_spike.
-- @column severity VARCHAR  warn; info when they cost under 1% of the run's step time.
-- @column value DOUBLE fmt=count  Spiking steps.
-- @column unit VARCHAR  steps.
-- @column steps INTEGER[]  The spiking steps.
-- @column stage VARCHAR  The stage whose time grew most on those steps (e.g. save_checkpoint).
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
    SELECT step, step_s, usual_s, lag(step) OVER (ORDER BY step) AS previous
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
    SELECT key, sum(seconds - usual)::DOUBLE AS grew_s
    FROM (SELECT step, key, seconds,
                 median(seconds) OVER (PARTITION BY key ORDER BY step
                                       ROWS BETWEEN 20 PRECEDING AND 1 PRECEDING) AS usual
          FROM stages)
    WHERE step IN (SELECT step FROM spikes)
    GROUP BY key),
summary AS (
    SELECT
        count(*) AS n,
        list(step ORDER BY step) AS steps,
        sum(step_s - usual_s)::DOUBLE AS cost_s,
        CASE WHEN count(*) >= 3 AND min(step - previous) = max(step - previous)
             THEN min(step - previous) END AS period,
        (SELECT sum(step_s)::DOUBLE FROM timed) AS run_s
    FROM spikes),
top_stage AS (
    SELECT replace(key, 'timing_s/', '') AS stage, grew_s
    FROM stage_growth ORDER BY grew_s DESC, key LIMIT 1)
SELECT
    'step_time_spike' AS kind,
    CASE WHEN s.cost_s < 0.01 * s.run_s THEN 'info' ELSE 'warn' END AS severity,
    s.n::DOUBLE AS value,
    'steps' AS unit,
    s.steps,
    t.stage,
    printf('%d step%s took over twice the median of the steps before %s (%s%s), costing %s of run '
           'time (%.1f%%)%s.',
           s.n, CASE WHEN s.n = 1 THEN '' ELSE 's' END, CASE WHEN s.n = 1 THEN 'it' ELSE 'them' END,
           CASE WHEN s.n <= 6 THEN 'step' || CASE WHEN s.n = 1 THEN ' ' ELSE 's ' END
                                   || array_to_string(s.steps, ', ')
                ELSE printf('steps %d, %d, ... %d', s.steps[1], s.steps[2], s.steps[s.n]) END,
           CASE WHEN s.period IS NOT NULL THEN printf(', every %d steps', s.period) ELSE '' END,
           CASE WHEN s.cost_s >= 3600 THEN printf('%.1f h', s.cost_s / 3600)
                WHEN s.cost_s >= 60 THEN printf('%.1f min', s.cost_s / 60)
                ELSE printf('%.0f s', s.cost_s) END,
           100 * s.cost_s / NULLIF(s.run_s, 0),
           CASE WHEN t.grew_s > 0 THEN printf('; most of the extra time was in %s (+%.0f s in all)%s',
                                              t.stage, t.grew_s,
                                              CASE t.stage WHEN 'save_checkpoint' THEN ': save checkpoints less often or asynchronously'
                                                           WHEN 'testing' THEN ': validate less often'
                                                           ELSE '' END)
                ELSE '' END) AS text,
    '/api/queries/stage_breakdown?run_id=' || $run_id AS evidence
FROM summary s LEFT JOIN top_stage t ON true
WHERE s.n > 0

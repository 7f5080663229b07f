-- name: finding_collapse
-- title: Finding: response-length collapse
-- section: Findings
-- stored: yes
-- The first stretch of at least 5 consecutive steps (among steps that log a mean response
-- length) whose mean response length is 2 tokens or less, after some earlier step's mean was
-- over 10: the policy stopped generating.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  collapse.
-- @column severity VARCHAR  critical.
-- @column value DOUBLE fmt=count  Steps in the collapsed stretch.
-- @column unit VARCHAR  steps.
-- @column steps INTEGER[]  The collapsed steps.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the length series.
-- @chart table
WITH marked AS (
    SELECT
        step, mean_len, source,
        mean_len <= 2 AS collapsed,
        max(mean_len) OVER (ORDER BY step ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS best_before,
        row_number() OVER (ORDER BY step) AS i
    FROM (SELECT step, response_mean AS mean_len, source FROM length_steps WHERE NOT partial)),
stretches AS (
    -- consecutive collapsed steps share i - (their rank among collapsed steps)
    SELECT *, i - row_number() OVER (ORDER BY step) AS stretch
    FROM marked WHERE collapsed AND best_before > 10),
first_stretch AS (
    SELECT
        stretch,
        count(*) AS steps_collapsed,
        list(step ORDER BY step) AS steps,
        min(step) AS first_step,
        max(step) AS last_step,
        avg(mean_len) AS mean_len,
        first(source ORDER BY step) AS source
    FROM stretches
    GROUP BY stretch
    HAVING count(*) >= 5
    ORDER BY min(step)
    LIMIT 1),
before AS (
    SELECT
        max(m.step) FILTER (WHERE m.mean_len > 10) AS healthy_step,
        first(m.mean_len ORDER BY m.step DESC) FILTER (WHERE m.mean_len > 10) AS healthy_len,
        first(m.step ORDER BY m.mean_len DESC, m.step) AS peak_step,
        max(m.mean_len) AS peak_len
    FROM marked m, first_stretch f
    WHERE m.step < f.first_step),
score AS (
    SELECT
        avg(value) FILTER (WHERE step < f.first_step) AS before_score,
        avg(value) FILTER (WHERE step BETWEEN f.first_step AND f.last_step) AS during_score
    FROM canonical_metrics, first_stretch f
    WHERE run_id = $run_id AND key = 'critic/score/mean' AND NOT isnan(value))
SELECT
    'collapse' AS kind,
    'critical' AS severity,
    f.steps_collapsed::DOUBLE AS value,
    'steps' AS unit,
    f.steps,
    NULL::VARCHAR AS stage,
    printf('Responses collapsed to %.1f tokens on average from step %d%s (%s); the mean was '
           '%,d tokens at step %d and %,d at its peak (step %d)%s: the policy stopped generating. '
           'Roll back to a checkpoint from before the fall and look at the reward and the KL there.',
           f.mean_len, f.first_step,
           CASE WHEN f.last_step = (SELECT max(step) FROM marked) THEN ' to the end of the log'
                ELSE printf(' to step %d', f.last_step) END,
           -- a log's cut-short lines leave steps out: the span is then more steps than were logged
           CASE WHEN f.steps_collapsed = f.last_step - f.first_step + 1 THEN printf('%,d steps', f.steps_collapsed)
                ELSE printf('%,d logged steps of %,d', f.steps_collapsed, f.last_step - f.first_step + 1) END,
           round(b.healthy_len)::BIGINT, b.healthy_step, round(b.peak_len)::BIGINT,
           b.peak_step,
           CASE WHEN s.during_score IS NOT NULL AND s.before_score IS NOT NULL
                THEN printf(', and the mean score was %.2f against %.2f before', s.during_score,
                            s.before_score)
                ELSE '' END) AS text,
    CASE WHEN f.source = 'samples' THEN '/api/queries/length_stats?run_id=' || $run_id
         ELSE '/api/queries/metric?run_id=' || $run_id || '&key=response_length/mean' END AS evidence
FROM first_stretch f, before b, score s

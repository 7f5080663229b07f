-- name: finding_length_drift
-- title: Finding: response length drift
-- section: Findings
-- stored: yes
-- Mean response length over the last 10% of steps against the first 10% (at least one step
-- each): verl's response_length/mean, or the step's mean response_len from samples (characters
-- where runs.length_unit says so, and the text says characters). Emitted
-- at a ratio of 1.5 or more, or 0.67 or less.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  length_drift.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=x  Last-10% mean length over first-10% mean length.
-- @column unit VARCHAR  ratio.
-- @column steps INTEGER[]  The first and last steps compared.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the length series.
-- @chart table
WITH ranked AS (
    SELECT step, mean_len, source, row_number() OVER (ORDER BY step) AS i, count(*) OVER () AS n
    FROM (SELECT step, response_mean AS mean_len, source FROM length_steps)),
ends AS (
    SELECT
        max(n) AS n,
        greatest(1, floor(max(n) * 0.1))::INTEGER AS k,
        first(source ORDER BY step) AS source
    FROM ranked),
cmp AS (
    SELECT
        e.n, e.k, e.source,
        avg(r.mean_len) FILTER (WHERE r.i <= e.k) AS first_mean,
        avg(r.mean_len) FILTER (WHERE r.i > e.n - e.k) AS last_mean,
        list(r.step ORDER BY r.step) FILTER (WHERE r.i <= e.k OR r.i > e.n - e.k) AS steps
    FROM ranked r, ends e
    GROUP BY e.n, e.k, e.source),
drift AS (
    SELECT *, last_mean / NULLIF(first_mean, 0) AS ratio FROM cmp WHERE n >= 2),
score AS (
    -- verl's mean score over the same first and last steps, to read the drift against
    SELECT
        avg(m.value) FILTER (WHERE list_contains(d.steps, m.step) AND m.step <= d.steps[d.k]) AS first_score,
        avg(m.value) FILTER (WHERE list_contains(d.steps, m.step) AND m.step > d.steps[d.k]) AS last_score
    FROM canonical_metrics m, drift d
    WHERE m.run_id = $run_id AND m.key = 'critic/score/mean' AND NOT isnan(m.value))
SELECT
    'length_drift' AS kind,
    'warn' AS severity,
    ratio AS value,
    'ratio' AS unit,
    steps,
    NULL::VARCHAR AS stage,
    printf('Mean response length %s over the run, from %,d %s (%s) to %,d (%s)%s%s',
           CASE WHEN ratio >= 1.5 THEN printf('grew %.1f×', ratio)
                WHEN ratio >= 0.1 THEN printf('fell to %.2f× of its start', ratio)
                ELSE printf('fell to %.1f%% of its start', 100 * ratio) END,
           round(first_mean)::BIGINT,
           CASE WHEN source <> 'verl' AND (SELECT length_unit FROM runs WHERE run_id = $run_id) = 'chars'
                THEN 'characters' ELSE 'tokens' END,
           CASE WHEN k = 1 THEN 'first step' ELSE printf('first %d steps', k) END,
           round(last_mean)::BIGINT, CASE WHEN k = 1 THEN 'last step' ELSE printf('last %d steps', k) END,
           CASE WHEN s.first_score IS NOT NULL AND s.last_score IS NOT NULL
                THEN printf(', while the mean score went from %.2f to %.2f', s.first_score, s.last_score)
                ELSE '' END,
           CASE WHEN ratio >= 1.5
                THEN ': every rollout waits on longer generations; watch the share cut at the cap, '
                     'and consider an overlong penalty or a larger max_response_len.'
                ELSE ': shorter answers are only progress if the score held; read the two together.' END)
 AS text,
    CASE WHEN source = 'samples' THEN '/api/queries/length_stats?run_id=' || $run_id
         ELSE '/api/queries/metric?run_id=' || $run_id || '&key=response_length/mean' END AS evidence
FROM drift, score s
WHERE ratio >= 1.5 OR ratio <= 0.67

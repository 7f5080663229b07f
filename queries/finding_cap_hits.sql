-- name: finding_cap_hits
-- title: Finding: responses cut at the length cap
-- section: Findings
-- stored: yes
-- Share of responses at the response-length cap over the last 10% of steps (at least one):
-- the logged response_length/clip_ratio (verl's, or a framework's key mapped to it), or samples truncated or at runs.max_response_len. Without
-- a known cap, the run's longest length is taken as the cap when at least 2% of all its
-- responses are exactly that long (said as inferred). Emitted at 5% or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  cap_hits.
-- @column severity VARCHAR  warn; critical at 20% or more.
-- @column value DOUBLE fmt=pct  Share of the last steps' responses at the cap.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The last steps measured.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step cap shares.
-- @chart table
WITH run AS (
    SELECT max_response_len AS cap, coalesce(framework, 'verl') AS framework FROM runs WHERE run_id = $run_id),
lengths AS (
    SELECT
        l.step, l.n, l.capped, l.cap_known, l.response_max, l.at_max,
        max(l.response_max) OVER () AS run_max
    FROM step_lengths l
    WHERE l.run_id = $run_id AND l.step NOT IN (SELECT step FROM partial_steps)),
inferred AS (
    -- a cap shows as many responses of exactly the longest length
    SELECT
        max(run_max) AS cap,
        sum(at_max) FILTER (WHERE response_max = run_max)::DOUBLE / NULLIF(sum(n)::DOUBLE, 0)
            AS share_at_max
    FROM lengths),
per_step AS (
    SELECT
        step,
        CASE WHEN (SELECT cap FROM run) IS NOT NULL OR cap_known > 0 THEN capped::DOUBLE
             WHEN (SELECT share_at_max FROM inferred) >= 0.02 AND response_max = run_max THEN at_max::DOUBLE
             WHEN (SELECT share_at_max FROM inferred) >= 0.02 THEN 0.0
        END AS at_cap,
        n::DOUBLE AS n,
        'samples' AS source
    FROM lengths
    UNION ALL
    SELECT step, clip_ratio, 1.0, 'verl'
    FROM length_steps
    WHERE source = 'verl' AND NOT isnan(clip_ratio)),
ranked AS (
    SELECT *, row_number() OVER (ORDER BY step DESC) AS back, count(*) OVER () AS steps_known
    FROM per_step WHERE at_cap IS NOT NULL),
last_steps AS (
    SELECT
        sum(at_cap)::DOUBLE / NULLIF(sum(n)::DOUBLE, 0) AS share,
        list(step ORDER BY step) AS steps,
        max(back) AS k,
        first(source ORDER BY step) AS source
    FROM ranked
    WHERE back <= greatest(1, floor(steps_known * 0.1)))
SELECT
    'cap_hits' AS kind,
    CASE WHEN s.share >= 0.2 THEN 'critical' ELSE 'warn' END AS severity,
    s.share AS value,
    'share' AS unit,
    s.steps,
    NULL::VARCHAR AS stage,
    printf('%.1f%% of responses in the last %s stopped at the %s: they were cut before '
           'they finished, and their tokens were still generated; raise max_response_len or add '
           'an overlong penalty.',
           100 * s.share, CASE WHEN s.k = 1 THEN 'step' ELSE printf('%d steps', s.k) END,
           CASE WHEN s.source = 'verl' AND r.framework = 'verl' THEN 'response-length cap (verl clip_ratio)'
                WHEN s.source = 'verl' THEN printf('response-length cap (%s''s logged clip ratio)', r.framework)
                WHEN r.cap IS NOT NULL THEN printf('%,d-token cap', r.cap)
                WHEN i.share_at_max >= 0.02
                THEN printf('%,d-token cap (inferred: %.1f%% of all responses are exactly %,d tokens long)',
                            i.cap, 100 * i.share_at_max, i.cap)
                ELSE 'response-length cap' END) AS text,
    CASE WHEN s.source = 'verl' THEN '/api/queries/rollout_tail_verl?run_id=' || $run_id
         ELSE '/api/queries/length_stats?run_id=' || $run_id END AS evidence
FROM last_steps s, run r, inferred i
WHERE s.share >= 0.05

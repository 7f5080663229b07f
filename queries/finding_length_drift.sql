-- name: finding_length_drift
-- title: Finding: response length drift, or a long tail
-- section: Findings
-- stored: yes
-- Response length over the last 10% of steps against the first 10% (at least one step each), on
-- runs of 5 steps or more (fewer show no trend), steps cut short (partial_steps) left out and said. From samples the median decides (the mean
-- said beside it when it disagrees): median ratio 1.5 or more, or 0.67 or less, is drift
-- (length_drift); a mean past those ratios with the median inside them is a long tail that came
-- or went (length_tail), said with the longest response. From verl's metrics, which log no
-- median, the mean decides (length_drift). Lengths are characters where runs.length_unit says
-- so (the text says characters).
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  length_drift, or length_tail.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=x  Last-10% over first-10% length: the median's (drift from samples), else the mean's.
-- @column unit VARCHAR  ratio.
-- @column steps INTEGER[]  The first and last steps compared.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the length series.
-- @chart table
WITH ranked AS (
    SELECT step, response_mean AS mean_len, response_p50 AS median_len, response_max, source,
           row_number() OVER (ORDER BY step) AS i, count(*) OVER () AS n
    FROM length_steps
    WHERE NOT partial),
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
        avg(r.median_len) FILTER (WHERE r.i <= e.k) AS first_median,
        avg(r.median_len) FILTER (WHERE r.i > e.n - e.k) AS last_median,
        max(r.response_max) FILTER (WHERE r.i <= e.k) AS first_max,
        max(r.response_max) FILTER (WHERE r.i > e.n - e.k) AS last_max,
        list(r.step ORDER BY r.step) FILTER (WHERE r.i <= e.k OR r.i > e.n - e.k) AS steps
    FROM ranked r, ends e
    GROUP BY e.n, e.k, e.source),
drift AS (
    SELECT *,
           last_mean / NULLIF(first_mean, 0) AS mean_ratio,
           last_median / NULLIF(first_median, 0) AS median_ratio,
           CASE WHEN (SELECT length_unit FROM runs WHERE run_id = $run_id) = 'chars' AND source <> 'verl'
                THEN 'characters' ELSE 'tokens' END AS unit_word
    FROM cmp WHERE n >= 5),
judged AS (
    SELECT *,
           CASE basis WHEN 'median' THEN median_ratio ELSE mean_ratio END AS ratio,
           CASE basis WHEN 'median' THEN first_median ELSE first_mean END AS first_len,
           CASE basis WHEN 'median' THEN last_median ELSE last_mean END AS last_len
    FROM (SELECT *,
                 CASE WHEN median_ratio IS NULL AND (mean_ratio >= 1.5 OR mean_ratio <= 0.67) THEN 'mean'
                      WHEN median_ratio >= 1.5 OR median_ratio <= 0.67 THEN 'median'
                      WHEN median_ratio IS NOT NULL AND (mean_ratio >= 1.5 OR mean_ratio <= 0.67) THEN 'tail'
                 END AS basis
          FROM drift)),
score AS (
    -- verl's mean score over the same first and last steps, to read the drift against
    SELECT
        avg(m.value) FILTER (WHERE list_contains(d.steps, m.step) AND m.step <= d.steps[d.k]) AS first_score,
        avg(m.value) FILTER (WHERE list_contains(d.steps, m.step) AND m.step > d.steps[d.k]) AS last_score
    FROM canonical_metrics m, drift d
    WHERE m.run_id = $run_id AND m.key = 'critic/score/mean' AND NOT isnan(m.value)),
cut AS (
    -- the steps left out as cut short, said in the sentence
    SELECT CASE WHEN count(*) = 0 THEN ''
                WHEN count(*) = 1 THEN printf('; step %d holds %,d of a typical %,.0f responses and is left out',
                                              min(step), min(n), min(typical))
                ELSE printf('; %d steps cut short (under half a typical step''s %,.0f responses) are left out',
                            count(*), min(typical)) END AS note
    FROM partial_steps)
SELECT
    CASE WHEN j.basis = 'tail' THEN 'length_tail' ELSE 'length_drift' END AS kind,
    'warn' AS severity,
    j.ratio AS value,
    'ratio' AS unit,
    j.steps,
    NULL::VARCHAR AS stage,
    CASE WHEN j.basis = 'tail'
    THEN printf('Mean response length %s over the run while the median held (%,d to %,d %s, %s to %s), '
                'the longest going from %,d to %,d: a long tail %s, not drift%s; %s',
                CASE WHEN j.mean_ratio >= 1.5 THEN printf('grew %.1f×', j.mean_ratio)
                     ELSE printf('fell to %.2f× of its start', j.mean_ratio) END,
                round(j.first_median)::BIGINT, round(j.last_median)::BIGINT, j.unit_word,
                CASE WHEN j.k = 1 THEN 'first step' ELSE printf('first %d steps', j.k) END,
                CASE WHEN j.k = 1 THEN 'last step' ELSE printf('last %d steps', j.k) END,
                round(j.first_max)::BIGINT, round(j.last_max)::BIGINT,
                CASE WHEN j.mean_ratio >= 1.5 THEN 'came' ELSE 'went' END, c.note,
                CASE WHEN j.mean_ratio >= 1.5
                     THEN 'a few long responses leave the engines waiting: look at what produces them, and bound them with the cap or an overlong penalty.'
                     ELSE 'the long responses stopped: check whether the cap or a penalty changed.' END)
    ELSE printf('%s response length %s over the run, from %,d %s (%s) to %,d (%s)%s%s%s%s',
                CASE WHEN j.basis = 'median' THEN 'Median' ELSE 'Mean' END,
                CASE WHEN j.ratio >= 1.5 THEN printf('grew %.1f×', j.ratio)
                     WHEN j.ratio >= 0.1 THEN printf('fell to %.2f× of its start', j.ratio)
                     ELSE printf('fell to %.1f%% of its start', 100 * j.ratio) END,
                round(j.first_len)::BIGINT, j.unit_word,
                CASE WHEN j.k = 1 THEN 'first step' ELSE printf('first %d steps', j.k) END,
                round(j.last_len)::BIGINT,
                CASE WHEN j.k = 1 THEN 'last step' ELSE printf('last %d steps', j.k) END,
                CASE WHEN j.basis = 'median' AND NOT (j.mean_ratio >= 1.5 OR j.mean_ratio <= 0.67)
                     THEN printf(' (the mean only %.2f×)', j.mean_ratio) ELSE '' END,
                CASE WHEN s.first_score IS NOT NULL AND s.last_score IS NOT NULL
                     THEN printf(', while the mean score went from %.2f to %.2f', s.first_score, s.last_score)
                     ELSE '' END,
                c.note,
                CASE WHEN j.ratio >= 1.5
                     THEN ': every rollout waits on longer generations; watch the share cut at the cap, '
                          'and consider an overlong penalty or a larger max_response_len.'
                     ELSE ': shorter answers are only progress if the score held; read the two together.' END)
    END AS text,
    CASE WHEN j.source = 'samples' THEN '/api/queries/length_stats?run_id=' || $run_id
         ELSE '/api/queries/metric?run_id=' || $run_id || '&key=response_length/mean' END AS evidence
FROM judged j, score s, cut c
WHERE j.basis IS NOT NULL

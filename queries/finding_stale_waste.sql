-- name: finding_stale_waste
-- title: Finding: generation dropped as too stale
-- section: Findings
-- stored: yes
-- Generation thrown away because it was too old to train on (staleness_steps): from trajectories,
-- the response tokens of those dropped as too stale over every trajectory's tokens; from logged
-- counters only, the samples dropped over those generated. GPU time spent for nothing. Emitted at
-- 5% or more; warn.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  stale_waste.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=pct  Share of generated tokens (logged: samples) dropped as too stale.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The steps with a stale drop.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of async_drops.
-- @chart table
WITH summary AS (
    SELECT
        sum(stale_tokens) FILTER (WHERE basis = 'per-sample')::DOUBLE AS stale_tokens,
        sum(tokens) FILTER (WHERE basis = 'per-sample')::DOUBLE AS tokens,
        sum(dropped_stale) FILTER (WHERE basis = 'logged')::DOUBLE AS dropped,
        sum(generated) FILTER (WHERE basis = 'logged')::DOUBLE AS generated,
        list(step ORDER BY step) FILTER (WHERE dropped_stale > 0) AS steps
    FROM staleness_steps),
share AS (
    SELECT *,
           CASE WHEN tokens > 0 THEN stale_tokens / NULLIF(tokens, 0)
                ELSE dropped / NULLIF(generated, 0) END AS wasted,
           tokens > 0 AS by_tokens
    FROM summary)
SELECT
    'stale_waste' AS kind,
    'warn' AS severity,
    wasted AS value,
    'share' AS unit,
    steps,
    'gen' AS stage,
    printf('%.0f%% of generated %s (%,d of %,d) were dropped as too stale to train on: GPU time spent '
           'for nothing; generate less far ahead of the trainer (a smaller queue or staleness bound), or '
           'keep stale samples with an off-policy correction instead of dropping them.',
           100 * wasted, CASE WHEN by_tokens THEN 'response tokens' ELSE 'samples' END,
           round(CASE WHEN by_tokens THEN stale_tokens ELSE dropped END)::BIGINT,
           round(CASE WHEN by_tokens THEN tokens ELSE generated END)::BIGINT) AS text,
    '/api/queries/async_drops?run_id=' || $run_id AS evidence
FROM share
WHERE wasted >= 0.05

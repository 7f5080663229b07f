-- name: finding_reward_imbalance
-- title: Finding: slow reward ranks
-- section: Findings
-- stored: yes
-- Mean over steps of reward_imbalance's slowest / mean reward seconds per rank, the rank that
-- was slowest most often, and whether the slow rank's time follows its response tokens: the
-- mean over steps of tokens_corr with three or more ranks; with two, in how many steps the
-- slower rank had more tokens (tokens_corr +1) or fewer (-1). Emitted at 1.2 or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  reward_imbalance.
-- @column severity VARCHAR  warn at 1.5 or more, else info.
-- @column value DOUBLE fmt=x  Mean of slowest / mean reward time per rank.
-- @column unit VARCHAR  ratio.
-- @column steps INTEGER[]  The worst step.
-- @column stage VARCHAR  reward.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step reward times.
-- @chart table
WITH per_step AS (
    SELECT step, imbalance, max_s - mean_s AS wait_s, slowest_rank AS slowest,
           -- two points always correlate perfectly: only three or more ranks give a correlation;
           -- with two, its sign says whether the slower rank had more tokens
           CASE WHEN ranks >= 3 THEN tokens_corr END AS tokens_corr,
           CASE WHEN ranks = 2 AND NOT isnan(tokens_corr) THEN tokens_corr > 0 END AS slower_more
    FROM reward_steps
    WHERE ranks > 1),
counted AS (
    SELECT *, count(*) OVER (PARTITION BY slowest) AS slowest_count FROM per_step),
summary AS (
    SELECT avg(imbalance) AS imb, first(step ORDER BY imbalance DESC, step) AS worst_step, max(imbalance) AS worst,
           first(slowest ORDER BY slowest_count DESC, slowest) AS usual_slowest, avg(tokens_corr) FILTER (WHERE NOT isnan(tokens_corr)) AS corr,
           sum(wait_s)::DOUBLE AS wait_s, count(*) AS n,
           count(slower_more) AS pairs, count(*) FILTER (WHERE slower_more) AS pairs_more
    FROM counted)
SELECT
    'reward_imbalance' AS kind,
    CASE WHEN imb >= 1.5 THEN 'warn' ELSE 'info' END AS severity,
    imb AS value,
    'ratio' AS unit,
    [worst_step] AS steps,
    'reward' AS stage,
    printf('The slowest rank''s reward took %.2f× the mean rank''s on average (%.2f× at step %d; '
           'rank %d was slowest most often), %.0f s of waiting over %d steps%s.',
           imb, worst, worst_step, usual_slowest, wait_s, n,
           CASE WHEN corr >= 0.7 THEN printf(': its time follows its response tokens (correlation %.2f), '
                                             'so spread long responses across reward workers', corr)
                WHEN corr IS NOT NULL AND corr < 0.3
                THEN printf(': its time does not follow response tokens (correlation %.2f); look at '
                            'that rank''s verifier or sandbox', corr)
                WHEN corr IS NOT NULL
                THEN printf(': its time partly follows its response tokens (correlation %.2f); spread '
                            'long responses across reward workers, then compare that rank''s verifier '
                            'or sandbox with the others''', corr)
                WHEN pairs > 0 AND pairs_more * 3 >= pairs * 2
                THEN printf(': the slower of the two ranks also had more response tokens in %d of %d '
                            'steps, so spread long responses across reward workers', pairs_more, pairs)
                WHEN pairs > 0 AND pairs_more * 3 <= pairs
                THEN printf(': the slower of the two ranks had fewer response tokens in %d of %d steps, '
                            'so look at that rank''s verifier or sandbox', pairs - pairs_more, pairs)
                ELSE ': compare that rank''s verifier or sandbox, and its response tokens, with the '
                     'other ranks''' END) AS text,
    '/api/queries/reward_imbalance?run_id=' || $run_id AS evidence
FROM summary
WHERE imb >= 1.2

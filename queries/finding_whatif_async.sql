-- name: finding_whatif_async
-- title: Finding: what training asynchronously would change
-- section: Findings
-- stored: yes
-- From a stored async what-if of a synchronous run (whatif_async): one step off policy at its best
-- split of the GPUs, against the model's own synchronous steps over the same steps, with fully
-- async within 2 versions beside it when it gains more. Emitted when the overlap would cut the
-- run's time by 5% or more, or when every split would lengthen it (the training stages leave
-- too few GPUs to the trainer pool); silent in between. Said as an estimate with the gen model's
-- forward error on this run (gen_forecast), next to published speedups with their workload:
-- verl fully_async_policy 2.35-2.67x on Qwen2.5-7B with 128 GPUs
-- (verl.readthedocs.io/en/latest/advance/fully_async.html), AReaL up to 2.77x on math and code
-- reasoning with the same GPUs (arXiv 2505.24298).
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  whatif_async.
-- @column severity VARCHAR  info.
-- @column value DOUBLE fmt=pct  Share of the run's (model) time one step off policy would save; negative when it would add time.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  Empty: the whole run.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of whatif_async.
-- @chart table
WITH modes AS (
    SELECT
        mode,
        any_value(rollout_share) AS share,
        any_value(rollout_gpus) AS rollout_gpus,
        any_value(gpus) AS gpus,
        sum(predicted_sync_s)::DOUBLE AS sync_s,
        sum(predicted_s)::DOUBLE AS async_s,
        sum(train_s)::DOUBLE / NULLIF(sum(predicted_sync_s)::DOUBLE, 0) AS train_share,
        sum(gen_s)::DOUBLE / NULLIF(sum(predicted_sync_s)::DOUBLE, 0) AS gen_share
    FROM whatif_async
    WHERE run_id = $run_id
    GROUP BY mode),
one AS (
    SELECT *, 1 - async_s / NULLIF(sync_s, 0) AS saved,
           CASE WHEN gpus IS NULL THEN printf('%.0f%% of the GPUs', 100 * share)
                ELSE printf('%d of %d GPUs', rollout_gpus, gpus) END AS split
    FROM modes WHERE mode = 'one-step-off'),
fully AS (
    SELECT 1 - async_s / NULLIF(sync_s, 0) AS saved FROM modes WHERE mode = 'fully-async:2'),
model AS (
    SELECT count(*) AS checked, avg(abs(predicted_s - measured_s) / NULLIF(measured_s, 0)) AS error
    FROM gen_forecast WHERE run_id = $run_id AND stage = 'gen'),
trust AS (
    SELECT CASE WHEN checked > 0
                THEN printf('the gen model behind it predicted this run''s last %d steps within %.1f%% on '
                            'average', checked, 100 * error)
                ELSE 'the gen model behind it is not validated forward on this run' END AS note
    FROM model)
SELECT
    'whatif_async' AS kind,
    'info' AS severity,
    o.saved AS value,
    'share' AS unit,
    []::INTEGER[] AS steps,
    'gen' AS stage,
    CASE WHEN o.saved >= 0.05
         THEN printf('Trained one step off policy, with %s generating while the rest train, this run''s '
                     'steps would take an estimated %.1f%% less time%s%s; an estimate from its own log, '
                     'not a promise (%s; stale samples can slow learning, which this does not model): '
                     'try verl''s one_step_off_policy or fully_async_policy (published: 2.35-2.67x on '
                     'Qwen2.5-7B with 128 GPUs; AReaL up to 2.77x on math and code).',
                     o.split, 100 * o.saved,
                     CASE WHEN o.gpus IS NULL THEN ''
                          ELSE printf(' (%.2f GPU-hours over the run)', (o.sync_s - o.async_s) * o.gpus / 3600.0) END,
                     CASE WHEN f.saved > o.saved + 0.005
                          THEN printf(', %.1f%% fully async within 2 policy versions', 100 * f.saved) ELSE '' END,
                     t.note)
         ELSE printf('Split into a rollout pool and a trainer pool, this run''s steps would take an estimated '
                     '%.1f%% longer even at the best split (%s generating): training is %.0f%% of its step '
                     'and generation %.0f%%, so the overlap hides less than the trainer loses with fewer '
                     'GPUs: stay colocated; async pays when generation, not training, takes most of the step (%s).',
                     -100 * o.saved, o.split, 100 * o.train_share, 100 * o.gen_share, t.note) END AS text,
    '/api/queries/whatif_async?run_id=' || $run_id AS evidence
FROM one o
CROSS JOIN trust t
LEFT JOIN fully f ON true
WHERE o.saved >= 0.05 OR o.saved < 0

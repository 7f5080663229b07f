-- name: async_queue
-- title: Async: samples waiting for the trainer
-- section: Async
-- stored: yes
-- The queue between the rollout engines and the trainer, as the framework last reported it in each
-- step (verl fully-async: the message queue's size when the batch's first sample was put). A queue
-- that stays full means the rollout runs ahead of the trainer up to its bound; one near empty, that
-- the trainer waits for every batch. Only runs that log it have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column queue_depth DOUBLE fmt=count  Samples waiting in the queue.
-- @chart line x=step y=queue_depth xlabel="step" ylabel="samples in the queue" title="Queue depth between rollout and trainer"
SELECT step, queue_depth
FROM async_logged
WHERE queue_depth IS NOT NULL
ORDER BY step

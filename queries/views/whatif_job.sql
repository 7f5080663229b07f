-- view: whatif_job
-- The GPUs of $run_id's job, which every rollout second saved counts on: the run's n_gpus,
-- else the count its logged ranks imply (run_ranks.gpus_from_ranks). One row; NULL when
-- neither is known. whatif and whatif_savings let a gpus parameter override it.
-- @column gpus BIGINT fmt=count  GPUs in the job.
SELECT coalesce((SELECT n_gpus FROM runs WHERE run_id = $run_id),
                (SELECT gpus_from_ranks FROM run_ranks)) AS gpus

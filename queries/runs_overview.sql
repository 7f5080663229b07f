-- name: runs_overview
-- title: Runs overview
-- section: Runs
-- One line per run, the worst problems first: its size, where its GPUs went idle and how many
-- findings of each severity its page shows. The figures are run_summary's and the counts the
-- findings', kept per run in run_overview whenever the run changes.
-- @column run_id VARCHAR  The run.
-- @column name VARCHAR  Its name.
-- @column framework VARCHAR  verl, rllm, ... when known.
-- @column model VARCHAR  Model, when known.
-- @column task VARCHAR  Task, when known.
-- @column format VARCHAR  Input format(s).
-- @column steps BIGINT fmt=count  Steps with any data.
-- @column samples BIGINT fmt=count  Responses; NULL when the run has no per-sample rows.
-- @column gpus BIGINT fmt=count  GPUs in the job (n_gpus, else inferred from the logged ranks).
-- @column max_response_len INTEGER fmt=tokens  Response-length cap (tokens), when known.
-- @column step_s_mean DOUBLE fmt=s  Mean step time (s).
-- @column rollout_idle_frac_mean DOUBLE fmt=pct  Mean share of each rollout the engines sat idle.
-- @column tail_ratio_max DOUBLE fmt=x  Largest longest-over-median response length of any step.
-- @column dp_imbalance_mean DOUBLE fmt=x  Mean max / mean tokens per DP rank.
-- @column filter_waste_share DOUBLE fmt=pct  Response tokens generated but never trained on.
-- @column gpu_idle_pct DOUBLE fmt=pct100  Mean idle share of the profiled GPU time (%).
-- @column findings_critical INTEGER fmt=count  Critical findings.
-- @column findings_warn INTEGER fmt=count  Warnings.
-- @column created_at TIMESTAMP  When the run was ingested (UTC).
-- @chart table title="Runs, the worst first"
SELECT
    r.run_id,
    r.name,
    r.framework,
    r.model,
    r.task,
    r.format,
    o.steps,
    o.samples,
    o.gpus,
    r.max_response_len,
    o.step_s_mean,
    o.rollout_idle_frac_mean,
    o.tail_ratio_max,
    o.dp_imbalance_mean,
    o.filter_waste_share,
    o.gpu_idle_pct,
    o.findings_critical,
    o.findings_warn,
    r.created_at
FROM runs r
LEFT JOIN run_overview o ON o.run_id = r.run_id
ORDER BY o.findings_critical DESC NULLS LAST, o.findings_warn DESC NULLS LAST, r.created_at DESC, r.run_id

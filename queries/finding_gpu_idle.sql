-- name: finding_gpu_idle
-- title: Finding: idle GPUs in the profiler trace
-- section: Findings
-- stored: yes
-- gpu_time's whole-trace rows (HTA's temporal breakdown, its default without the last profiler
-- step): the mean idle share over ranks, the worst rank, and the share of time that only
-- communication or memory kernels ran (when it rounds to 1% or more). Emitted at 10% idle or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  gpu_idle.
-- @column severity VARCHAR  warn at 25% or more, else info.
-- @column value DOUBLE fmt=pct  Mean idle share of the profiled GPU time over ranks.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  Empty: the whole trace.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of gpu_time.
-- @chart table
WITH ranks AS (
    SELECT rank, idle_pct / 100 AS idle, non_compute_pct / 100 AS non_compute, kernel_time_us
    FROM gpu_shares
    WHERE step IS NULL AND NOT include_last_step),
summary AS (
    SELECT avg(idle) AS idle, max(idle) AS worst, first(rank ORDER BY idle DESC, rank) AS worst_rank,
           avg(non_compute) AS non_compute, count(*) AS ranks
    FROM ranks)
SELECT
    'gpu_idle' AS kind,
    CASE WHEN idle >= 0.25 THEN 'warn' ELSE 'info' END AS severity,
    idle AS value,
    'share' AS unit,
    []::INTEGER[] AS steps,
    NULL::VARCHAR AS stage,
    printf('GPUs sat idle %.0f%% of the profiled time%s%s%s: idle time is time between kernels, so look '
           'for host-side stalls (data loading, synchronization, Python overhead) around the longest gaps.',
           100 * idle,
           CASE WHEN ranks > 1 THEN ' on average' ELSE '' END,
           CASE WHEN ranks > 1 THEN printf(' (worst: rank %d, %.0f%%)', worst_rank, 100 * worst) ELSE '' END,
           -- below 0.5% it would read 0% (or -0%: HTA's rounding to whole us can leave the compute
           -- union 1 us longer than the union of all kernels)
           CASE WHEN non_compute >= 0.005
                THEN printf(', and %.0f%% ran only communication or memory kernels', 100 * non_compute)
                ELSE '' END) AS text,
    '/api/queries/gpu_time?run_id=' || $run_id AS evidence
FROM summary
WHERE idle >= 0.1

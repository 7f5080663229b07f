-- name: gpu_critical_path_breakdown
-- title: Critical path of each profiled window by what bounds it
-- section: GPU
-- stored: yes
-- The numbers of gpu_critical_path drawn per window: its critical path's length cut into what
-- bounds it (CPU operators and runtime calls, GPU compute, NCCL communication, launch delays,
-- gaps between kernels), with the path's waiting on top, so each bar is the path's span. The
-- tallest part is what to shorten first; time off the path does not shorten the step. A
-- window is a profiler step, else the whole trace and each record_function range.
-- @param run_id VARCHAR  Run to analyse.
-- @column window VARCHAR  Rank and window: its profiler step, or its annotation (its last 24 characters), numbered from 0 in time where that repeats on the rank.
-- @column cpu_us DOUBLE fmt=us  CPU operators and runtime calls on the path (us).
-- @column gpu_compute_us DOUBLE fmt=us  GPU kernels, memcpys and memsets other than NCCL on the path (us).
-- @column gpu_communication_us DOUBLE fmt=us  NCCL kernels on the path (us).
-- @column launch_overhead_us DOUBLE fmt=us  Launch delays on the path (us).
-- @column kernel_gap_us DOUBLE fmt=us  Gaps between kernels on a stream on the path (us).
-- @column waiting_us DOUBLE fmt=us  The path's span minus its length: blocking calls and time between top-level operators (us).
-- @chart stacked x=window y=cpu_us,gpu_compute_us,gpu_communication_us,launch_overhead_us,kernel_gap_us,waiting_us xlabel="window" ylabel="time on the critical path (us)" title="Critical path per window, by what bounds it"
WITH named AS (
    SELECT *, CASE
        WHEN step IS NOT NULL THEN 'step ' || step
        WHEN length(annotation) > 24 THEN '…' || right(annotation, 23)
        ELSE annotation END AS short
    FROM critical_paths
    WHERE run_id = $run_id
)
SELECT
    'rank ' || rank || ' · ' || short || CASE
        WHEN count(*) OVER (PARTITION BY rank, short) > 1
        THEN ' #' || (row_number() OVER (PARTITION BY rank, short ORDER BY ts_us, annotation, instance) - 1)
        ELSE '' END AS window,
    cpu_us,
    gpu_compute_us,
    gpu_communication_us,
    launch_overhead_us,
    kernel_kernel_overhead_us AS kernel_gap_us,
    span_us - length_us AS waiting_us
FROM named
ORDER BY rank, ts_us, annotation, instance

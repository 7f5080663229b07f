-- name: gpu_critical_path
-- title: Critical path of each profiled step per rank, and what bounds it
-- section: GPU
-- stored: yes
-- From a Kineto trace: the critical path of each ProfilerStep window (a trace without
-- ProfilerSteps: of the whole trace and of each record_function range), as HTA 0.5's
-- critical_path_analysis builds it: CPU operators chained on each thread, launches to kernels,
-- kernels on a stream, and stream, event and device syncs. The path's length is the sum of its
-- edges; each share says how much of it was CPU work (operators and runtime calls), GPU compute,
-- NCCL communication, launch delay (kernel waiting for its launch on an empty stream) or
-- kernel-to-kernel gaps. Shortening anything off the path does not shorten the step. waiting_us
-- is the path's span minus its length: time on the path spent in blocking calls (cudaStreamSynchronize,
-- cudaMemcpy, ...) and between top-level operators. No rows for a run without a Kineto trace with CPU operators.
-- @param run_id VARCHAR  Run to analyse.
-- @column rank INTEGER fmt=count  Global rank.
-- @column annotation VARCHAR  The window: ProfilerStep, (whole trace), or a record_function range's name.
-- @column instance INTEGER fmt=count  Which window of that name, from 0 in the trace's order.
-- @column step INTEGER fmt=count  Profiler step of a ProfilerStep window, else NULL.
-- @column window_us DOUBLE fmt=us  The window's length (us).
-- @column length_us DOUBLE fmt=us  The critical path's length: the sum of its edges (us).
-- @column cpu_pct DOUBLE fmt=pct100  Share of the length on CPU operators and runtime calls (%).
-- @column gpu_compute_pct DOUBLE fmt=pct100  Share on GPU kernels, memcpys and memsets other than NCCL (%).
-- @column gpu_communication_pct DOUBLE fmt=pct100  Share on NCCL kernels (%).
-- @column launch_overhead_pct DOUBLE fmt=pct100  Share on launch delays (%).
-- @column kernel_gap_pct DOUBLE fmt=pct100  Share on gaps between kernels on a stream (%).
-- @column waiting_us DOUBLE fmt=us  The path's span minus its length: waiting in blocking calls and between top-level operators (us).
-- @column events BIGINT fmt=count  Events on the path.
-- @chart table
SELECT
    rank,
    annotation,
    instance,
    step,
    dur_us AS window_us,
    length_us,
    100 * cpu_us / NULLIF(length_us, 0) AS cpu_pct,
    100 * gpu_compute_us / NULLIF(length_us, 0) AS gpu_compute_pct,
    100 * gpu_communication_us / NULLIF(length_us, 0) AS gpu_communication_pct,
    100 * launch_overhead_us / NULLIF(length_us, 0) AS launch_overhead_pct,
    100 * kernel_kernel_overhead_us / NULLIF(length_us, 0) AS kernel_gap_pct,
    span_us - length_us AS waiting_us,
    events
FROM critical_paths
WHERE run_id = $run_id
ORDER BY rank, ts_us, annotation, instance

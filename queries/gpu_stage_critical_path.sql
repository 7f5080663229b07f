-- name: gpu_stage_critical_path
-- title: Critical path inside each annotated range (RL stage), per rank
-- section: GPU
-- stored: yes
-- The critical paths of a rank's profiled windows (gpu_critical_path: its profiler steps, or its
-- whole trace when it has none) joined to its annotated ranges (verl's generate_sequences,
-- update_actor, ...; record_function and NVTX ranges, see gpu_stage_time): of each range's
-- time, how much the path spent inside it and on what, and how much it waited there. Each path
-- edge counts for the part of it inside the range, so a nested range's time also counts in its
-- parent's. What a range spends on the path is what shortening that stage can save; its time
-- off the path overlaps something longer. No rows for a run without both a critical path and
-- annotated ranges on the same rank.
-- @param run_id VARCHAR  Run to analyse.
-- @param rank INTEGER = NULL  Only this rank; NULL for every rank.
-- @param step INTEGER = NULL  Only ranges that start inside this profiler step's window; NULL for all.
-- @column rank INTEGER fmt=count  Global rank.
-- @column name VARCHAR  Range text.
-- @column stage VARCHAR  verl stage it serves (timing_s/<stage>), or NULL.
-- @column ranges BIGINT fmt=count  Ranges of this name the rank's paths pass through.
-- @column range_us DOUBLE fmt=us  Their summed length on the CPU (us).
-- @column path_us DOUBLE fmt=us  Critical path time inside them (us).
-- @column path_pct DOUBLE fmt=pct100  100 * path_us / range_us (%).
-- @column cpu_pct DOUBLE fmt=pct100  Share of path_us on CPU operators and runtime calls (%).
-- @column gpu_compute_pct DOUBLE fmt=pct100  Share on GPU kernels, memcpys and memsets other than NCCL (%).
-- @column gpu_communication_pct DOUBLE fmt=pct100  Share on NCCL kernels (%).
-- @column overhead_pct DOUBLE fmt=pct100  Share on launch delays and gaps between kernels (%).
-- @column waiting_us DOUBLE fmt=us  Time inside the ranges within the path's span but on none of its edges: waiting in blocking calls and between top-level operators (us).
-- @chart table
WITH paths AS (
    SELECT p.rank, p.annotation, p.instance
    FROM critical_paths p
    WHERE p.run_id = $run_id AND ($rank IS NULL OR p.rank = $rank)
        AND (p.step IS NOT NULL OR p.annotation = '(whole trace)')
),
edges AS (
    SELECT e.rank, e.annotation, e.instance, e.bound, e.ts_us, e.ts_us + e.dur_us AS end_us
    FROM critical_path_edges e JOIN paths USING (rank, annotation, instance)
    WHERE e.run_id = $run_id
),
spans AS (
    SELECT rank, annotation, instance, min(ts_us) AS start_us, max(end_us) AS end_us
    FROM edges GROUP BY rank, annotation, instance
),
ranges AS (
    SELECT r.rank, r.name, r.stage, r.ts_us, r.ts_us + r.dur_us AS end_us, r.dur_us,
        row_number() OVER (PARTITION BY r.rank ORDER BY r.ts_us, r.name, r.dur_us) AS range_no
    FROM step_ranges r
    WHERE ($rank IS NULL OR r.rank = $rank) AND ($step IS NULL OR r.step = $step)
),
in_span AS (
    SELECT r.rank, r.range_no, sum(least(r.end_us, s.end_us) - greatest(r.ts_us, s.start_us))::DOUBLE AS span_us
    FROM ranges r JOIN spans s ON s.rank = r.rank AND s.start_us < r.end_us AND s.end_us > r.ts_us
    GROUP BY r.rank, r.range_no
),
clipped AS (
    SELECT r.rank, r.range_no, e.bound, least(r.end_us, e.end_us) - greatest(r.ts_us, e.ts_us) AS clip_us
    FROM ranges r JOIN edges e ON e.rank = r.rank AND e.ts_us < r.end_us AND e.end_us > r.ts_us
    WHERE e.bound IS NOT NULL
),
on_path AS (
    SELECT rank, range_no,
        sum(clip_us)::DOUBLE AS path_us,
        sum(CASE WHEN bound = 'cpu' THEN clip_us ELSE 0 END)::DOUBLE AS cpu_us,
        sum(CASE WHEN bound = 'gpu_compute' THEN clip_us ELSE 0 END)::DOUBLE AS compute_us,
        sum(CASE WHEN bound = 'gpu_communication' THEN clip_us ELSE 0 END)::DOUBLE AS communication_us,
        sum(CASE WHEN bound IN ('launch_overhead', 'kernel_kernel_overhead') THEN clip_us ELSE 0 END)::DOUBLE AS overhead_us
    FROM clipped
    GROUP BY rank, range_no
),
per_range AS (
    SELECT r.rank, r.name, r.stage, r.dur_us AS range_us, i.span_us,
        coalesce(o.path_us, 0) AS path_us, coalesce(o.cpu_us, 0) AS cpu_us, coalesce(o.compute_us, 0) AS compute_us,
        coalesce(o.communication_us, 0) AS communication_us, coalesce(o.overhead_us, 0) AS overhead_us
    FROM ranges r
    JOIN in_span i ON i.rank = r.rank AND i.range_no = r.range_no
    LEFT JOIN on_path o ON o.rank = r.rank AND o.range_no = r.range_no
)
SELECT
    rank,
    name,
    any_value(stage) AS stage,
    count(*) AS ranges,
    sum(range_us)::DOUBLE AS range_us,
    sum(path_us)::DOUBLE AS path_us,
    100 * sum(path_us)::DOUBLE / NULLIF(sum(range_us)::DOUBLE, 0) AS path_pct,
    100 * sum(cpu_us)::DOUBLE / NULLIF(sum(path_us)::DOUBLE, 0) AS cpu_pct,
    100 * sum(compute_us)::DOUBLE / NULLIF(sum(path_us)::DOUBLE, 0) AS gpu_compute_pct,
    100 * sum(communication_us)::DOUBLE / NULLIF(sum(path_us)::DOUBLE, 0) AS gpu_communication_pct,
    100 * sum(overhead_us)::DOUBLE / NULLIF(sum(path_us)::DOUBLE, 0) AS overhead_pct,
    sum(span_us - path_us)::DOUBLE AS waiting_us
FROM per_range
GROUP BY rank, name
ORDER BY rank, path_us DESC, name

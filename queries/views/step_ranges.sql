-- view: step_ranges
-- $run_id's annotated ranges (gpu_ranges), each with the profiler step whose window on its rank
-- it starts inside (the latest such step, should windows overlap; NULL in none): what a run
-- page's GPU window (one rank's profiled step) filters on.
-- @column rank INTEGER fmt=count  Global rank.
-- @column step INTEGER fmt=count  Profiler step the range starts in, or NULL.
-- @column name VARCHAR  Range text.
-- @column stage VARCHAR  verl stage it serves, or NULL.
-- @column ts_us DOUBLE fmt=us  Start on the trace's clock (us).
-- @column dur_us DOUBLE fmt=us  Duration on the CPU (us).
-- @column gpu_events BIGINT fmt=count  GPU events launched inside it.
-- @column gpu_us DOUBLE fmt=us  Their summed durations (us).
-- @column communication_us DOUBLE fmt=us  Of which NCCL/RCCL kernels (us).
-- @column memory_us DOUBLE fmt=us  Of which memcpys and memsets (us).
-- @column gpu_start_us DOUBLE fmt=us  First start of those events (us).
-- @column gpu_end_us DOUBLE fmt=us  Last end of those events (us).
SELECT rank, step, name, stage, ts_us, dur_us, gpu_events, gpu_us, communication_us, memory_us, gpu_start_us, gpu_end_us
FROM (
    SELECT r.rank, w.step, r.name, r.stage, r.ts_us, r.dur_us, r.gpu_events, r.gpu_us, r.communication_us,
        r.memory_us, r.gpu_start_us, r.gpu_end_us,
        row_number() OVER (PARTITION BY r.rank, r.ts_us, r.name, r.dur_us, r.gpu_start_us
                           ORDER BY w.start_us DESC, w.step DESC) AS place
    FROM gpu_ranges r
    LEFT JOIN (
        SELECT rank, step, min(ts_us) AS start_us, max(ts_us + dur_us) AS end_us
        FROM profiler_steps
        WHERE run_id = $run_id
        GROUP BY rank, step
    ) w ON w.rank = r.rank AND r.ts_us >= w.start_us AND r.ts_us < w.end_us
    WHERE r.run_id = $run_id
) placed
WHERE place = 1

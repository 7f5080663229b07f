-- name: gpu_clocks
-- title: Clock of each rank's GPU trace
-- section: GPU
-- stored: yes
-- One row per rank: what its trace file's times are measured from, and how far its times were
-- moved to put every rank on the job's clock (the earliest origin among the run's files), the
-- alignment that gpu_stragglers compares ranks on. A Kineto trace is on its baseTimeNanoseconds
-- (PyTorch 2.1 on: the wall clock floored to a quarter year, so ranks that started profiling in
-- different quarters are 91.3 days apart before alignment), an older one on the Unix epoch, an
-- nsys export on the epoch through its session start; a file with a clock of its own (origin
-- unknown) leaves every rank unshifted. first_event_us is when the rank's first GPU event
-- or profiler step began on the job's clock: ranks whose profilers started together agree.
-- @param run_id VARCHAR  Run to analyse.
-- @column rank INTEGER fmt=count  Global rank.
-- @column clock VARCHAR  baseTimeNanoseconds, Unix epoch, nsys session start, or own (origin unknown).
-- @column origin_ns BIGINT fmt=count  The rank's time zero in ns since the Unix epoch (UTC); NULL for a clock of its own.
-- @column offset_us DOUBLE fmt=us  Added to the rank's times for the job's clock (us).
-- @column aligned BOOLEAN  Whether every rank is on the job's clock.
-- @column first_event_us DOUBLE fmt=us  Start of the rank's first GPU event or profiler step on the job's clock, after the earliest rank's (us).
-- @chart table
WITH firsts AS (
    SELECT rank, min(ts_us) AS first_ts
    FROM (
        SELECT rank, ts_us FROM gpu_events WHERE run_id = $run_id
        UNION ALL
        SELECT rank, ts_us FROM profiler_steps WHERE run_id = $run_id
    ) t
    GROUP BY rank
),
placed AS (
    SELECT k.rank, k.clock, k.origin_ns, k.offset_us, k.aligned, f.first_ts + k.offset_us AS first_ts
    FROM rank_clocks k LEFT JOIN firsts f USING (rank)
)
SELECT
    rank,
    clock,
    origin_ns,
    offset_us,
    aligned,
    first_ts - min(first_ts) OVER () AS first_event_us
FROM placed
ORDER BY rank

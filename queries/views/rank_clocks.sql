-- view: rank_clocks
-- $run_id's GPU trace ranks on one clock. Each file's times are us after its own origin
-- (gpu_ranks.clock_origin_ns): Kineto's baseTimeNanoseconds is the wall clock floored to a
-- quarter year per process, so the ranks of a job that straddles a quarter have origins 91.3
-- days apart; older Kineto and nsys write the Unix epoch. Adding offset_us to a rank's ts_us
-- puts it on the job's clock, whose zero is the run's earliest origin. When any file of the
-- run has a clock of its own (an nsys export without a session start), no rank is shifted.
-- Hosts' wall clocks agree only as closely as they are synchronised (NTP: about a ms).
-- @column rank INTEGER fmt=count  Global rank.
-- @column clock VARCHAR  What the rank's times are after: baseTimeNanoseconds, Unix epoch, nsys session start or own.
-- @column origin_ns BIGINT fmt=count  Unix time (ns) of the rank's ts_us = 0; NULL for a clock of its own.
-- @column offset_us DOUBLE fmt=us  Add to the rank's ts_us for the job's clock (us).
-- @column aligned BOOLEAN  Whether every rank of the run is on the job's clock.
SELECT
    rank,
    clock,
    origin_ns,
    CASE WHEN max(unknown) OVER () = 0
         THEN CAST(origin_ns - min(origin_ns) OVER () AS DOUBLE) / 1000 ELSE 0.0 END AS offset_us,
    max(unknown) OVER () = 0 AS aligned
FROM (
    SELECT rank, min(coalesce(clock, 'own')) AS clock, min(clock_origin_ns) AS origin_ns,
        max(CASE WHEN clock_origin_ns IS NULL THEN 1 ELSE 0 END) AS unknown
    FROM gpu_ranks
    WHERE run_id = $run_id
    GROUP BY rank
) ranks

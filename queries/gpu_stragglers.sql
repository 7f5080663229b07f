-- name: gpu_stragglers
-- title: Straggler ranks per profiler step
-- section: GPU
-- stored: yes
-- One row per profiler step and rank: the rank's ProfilerStep window length against the
-- step's slowest and mean rank, and when its last communication (NCCL/RCCL) kernel of the
-- step started against the other ranks'. Collectives end together, so the rank whose last
-- collective starts latest arrived last: a straggler the others waited for. Start times
-- are compared on the job's clock (rank_clocks: each file's origin taken into account), as
-- closely as the hosts' clocks agree.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Profiler step.
-- @column rank INTEGER fmt=count  Global rank.
-- @column dur_us DOUBLE fmt=us  The rank's ProfilerStep window length (us).
-- @column ranks BIGINT fmt=count  Ranks with this step.
-- @column max_dur_us DOUBLE fmt=us  Slowest rank's window length in the step (us).
-- @column mean_dur_us DOUBLE fmt=us  Mean window length over the step's ranks (us).
-- @column max_over_mean DOUBLE fmt=x  max_dur_us / mean_dur_us: 1 is perfectly balanced.
-- @column slowest_rank INTEGER fmt=count  Rank with the longest window (lowest rank on ties).
-- @column start_lag_us DOUBLE fmt=us  Start of the rank's ProfilerStep window after the earliest rank's start of the step (us).
-- @column last_comm_lag_us DOUBLE fmt=us  Start of the rank's last communication kernel in the step, after the earliest such start over ranks (us); NULL without one.
-- @column last_comm_spread_us DOUBLE fmt=us  Latest minus earliest last-communication-kernel start over the step's ranks (us).
-- @chart heatmap x=step y=rank z=dur_us xlabel="profiler step" ylabel="rank" title="Profiler step length per rank"
WITH windows AS (
    SELECT step, rank, max(dur_us) AS dur_us, min(ts_us) AS start_ts
    FROM profiler_steps
    WHERE run_id = $run_id
    GROUP BY step, rank
),
last_comm AS (
    SELECT step, rank, max(ts_us) AS last_comm_ts
    FROM gpu_events
    WHERE run_id = $run_id AND category = 'communication' AND step IS NOT NULL
    GROUP BY step, rank
),
rows AS (
    SELECT w.step, w.rank, w.dur_us, w.start_ts + coalesce(k.offset_us, 0) AS start_ts,
        c.last_comm_ts + coalesce(k.offset_us, 0) AS last_comm_ts
    FROM windows w
    LEFT JOIN last_comm c USING (step, rank)
    LEFT JOIN rank_clocks k USING (rank)
),
steps AS (
    SELECT step, count(*) AS ranks, max(dur_us) AS max_dur_us, avg(dur_us) AS mean_dur_us,
        min(start_ts) AS first_start_ts,
        min(last_comm_ts) AS first_comm_ts, max(last_comm_ts) AS latest_comm_ts
    FROM rows
    GROUP BY step
),
slowest AS (
    SELECT r.step, min(r.rank) AS slowest_rank
    FROM rows r JOIN steps s ON r.step = s.step AND r.dur_us = s.max_dur_us
    GROUP BY r.step
)
SELECT
    r.step,
    r.rank,
    r.dur_us,
    s.ranks,
    s.max_dur_us,
    s.mean_dur_us,
    s.max_dur_us / NULLIF(s.mean_dur_us, 0) AS max_over_mean,
    w.slowest_rank,
    r.start_ts - s.first_start_ts AS start_lag_us,
    r.last_comm_ts - s.first_comm_ts AS last_comm_lag_us,
    s.latest_comm_ts - s.first_comm_ts AS last_comm_spread_us
FROM rows r
JOIN steps s USING (step)
JOIN slowest w USING (step)
ORDER BY r.step, r.rank

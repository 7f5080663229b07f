-- name: gpu_timeline
-- title: GPU timeline of one rank and step
-- section: GPU
-- stored: yes
-- The GPU events of one rank in one profiler step, one lane per stream, with start times
-- from the step's ProfilerStep window start (or its first event). When the window has
-- more than max_bars events, each lane is cut into equal time bins and the events
-- starting in a bin become one bar from the first start to the last end, with their count
-- and busy time. rank defaults to the lowest rank, step to that rank's first step.
-- @param run_id VARCHAR  Run to analyse.
-- @param rank INTEGER = NULL  Rank to show; NULL for the lowest.
-- @param step INTEGER = NULL  Profiler step to show; NULL for the rank's first.
-- @param max_bars INTEGER = 4000 >= 1  Above this many events, bars are merged per time bin.
-- @column rank INTEGER fmt=count  Global rank shown.
-- @column step INTEGER fmt=count  Profiler step shown; NULL when the rank has no steps (its whole trace).
-- @column stream INTEGER fmt=count  CUDA/HIP stream: the lane.
-- @column start_us DOUBLE fmt=us  Bar start after the window start (us).
-- @column dur_us DOUBLE fmt=us  Bar length: last end minus first start of its events (us).
-- @column busy_us DOUBLE fmt=us  Summed duration of its events (us).
-- @column events BIGINT fmt=count  Events merged into the bar (1 when not downsampled).
-- @column category VARCHAR  compute, communication or memory (the most common one in a merged bar).
-- @column name VARCHAR  Kernel name, or 'N events' for a merged bar.
-- @chart timeline x=start_us y=stream z=dur_us color=category xlabel="time in step (us)" ylabel="stream" title="GPU timeline"
WITH chosen_rank AS (
    SELECT coalesce($rank, min(rank)) AS rank FROM gpu_events WHERE run_id = $run_id
),
chosen AS (
    SELECT c.rank, coalesce($step, (
        SELECT min(step) FROM gpu_events e WHERE e.run_id = $run_id AND e.rank = c.rank
    )) AS step
    FROM chosen_rank c
),
ev AS (
    SELECT e.stream, e.category, e.name_id, e.ts_us, e.dur_us
    FROM gpu_events e, chosen c
    WHERE e.run_id = $run_id AND e.rank = c.rank AND e.step IS NOT DISTINCT FROM c.step
),
frame AS (
    SELECT
        count(*) AS n,
        count(DISTINCT stream) AS lanes,
        min(ts_us) AS first_us,
        greatest(max(ts_us + dur_us) - min(ts_us), 1e-9) AS span_us,
        coalesce((SELECT min(p.ts_us) FROM profiler_steps p, chosen c
                  WHERE p.run_id = $run_id AND p.rank = c.rank AND p.step = c.step),
                 min(ts_us)) AS origin_us
    FROM ev
),
binned AS (
    SELECT ev.*, f.origin_us,
        CASE WHEN f.n <= $max_bars THEN row_number() OVER ()
             ELSE floor((ev.ts_us - f.first_us) * greatest($max_bars // NULLIF(f.lanes, 0), 1) / NULLIF(f.span_us, 0))
        END AS bin
    FROM ev, frame f
)
SELECT
    c.rank,
    c.step,
    b.stream,
    min(b.ts_us) - any_value(b.origin_us) AS start_us,
    max(b.ts_us + b.dur_us) - min(b.ts_us) AS dur_us,
    sum(b.dur_us)::DOUBLE AS busy_us,
    count(*) AS events,
    first(b.category ORDER BY b.dur_us DESC, b.category) AS category,
    CASE WHEN count(*) = 1 THEN any_value(k.name) ELSE count(*) || ' events' END AS name
FROM binned b
CROSS JOIN chosen c
LEFT JOIN (SELECT DISTINCT name_id, name FROM kernel_names WHERE run_id = $run_id) k USING (name_id)
GROUP BY c.rank, c.step, b.stream, b.bin
ORDER BY b.stream, start_us

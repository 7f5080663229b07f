"""One rank's GPU events in one profiler step as Chrome-trace JSON, for "Open in Perfetto", with
the step's critical path on a track of its own."""
from __future__ import annotations

from typing import Any

WINDOW_SQL = """
WITH chosen_rank AS (
    SELECT coalesce($rank, min(rank)) AS rank FROM gpu_events WHERE run_id = $run_id
)
SELECT c.rank, coalesce($step, (
    SELECT min(step) FROM gpu_events e WHERE e.run_id = $run_id AND e.rank = c.rank
)) AS step
FROM chosen_rank c
"""

EVENTS_SQL = """
SELECT stream, category, name, ts_us, dur_us
FROM gpu_events_named
WHERE run_id = $run_id AND rank = $rank AND step IS NOT DISTINCT FROM $step
ORDER BY ts_us
LIMIT $limit
"""

STEP_SQL = """
SELECT ts_us, dur_us FROM profiler_steps
WHERE run_id = $run_id AND rank = $rank AND step = $step
ORDER BY ts_us LIMIT 1
"""

# The critical path of the window: the profiler step's, or the whole trace's for a rank without
# steps. Edges that carry time only: a zero-weight dependency would be a slice of no length.
PATH_SQL = """
SELECT e.type, e.bound, e.name, e.track, e.ts_us, e.dur_us
FROM critical_path_edges e
JOIN critical_paths p USING (run_id, rank, annotation, instance)
WHERE e.run_id = $run_id AND e.rank = $rank AND e.dur_us > 0
    AND (p.step = $step OR ($step IS NULL AND p.annotation = '(whole trace)'))
ORDER BY e.seq
LIMIT $limit
"""
PATH_TID = -2


def chrome_trace(con, run_id: str, rank: int | None = None, step: int | None = None,
                 max_events: int = 1_000_000) -> dict[str, Any]:
    """The Chrome-trace document of a rank's GPU events in a step: one thread per stream.

    rank defaults to the lowest rank and step to that rank's first step, as in the
    gpu_timeline query. Raises LookupError when the window holds no GPU event.
    """
    rank, step = con.execute(WINDOW_SQL, {"run_id": run_id, "rank": rank, "step": step}).fetchone()
    key = {"run_id": run_id, "rank": rank, "step": step}
    rows = con.execute(EVENTS_SQL, {**key, "limit": max_events}).fetchall() if rank is not None else []
    if not rows:
        where = "" if rank is None else f", rank {rank}" + ("" if step is None else f", step {step}")
        raise LookupError(f"no GPU events for run {run_id!r}{where}")
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"GPU rank {rank}"}}]
    for stream in sorted({r[0] for r in rows}):
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": stream,
                       "args": {"name": f"stream {stream}"}})
    window = con.execute(STEP_SQL, key).fetchone() if step is not None else None
    if window:
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": -1,
                       "args": {"name": "profiler step"}})
        events.append({"ph": "X", "cat": "step", "name": f"ProfilerStep#{step}", "pid": rank,
                       "tid": -1, "ts": window[0], "dur": window[1]})
    events.extend(
        {"ph": "X", "cat": category, "name": name, "pid": rank, "tid": stream, "ts": ts, "dur": dur,
         "args": {"stream": stream, "step": step}}
        for stream, category, name, ts, dur in rows)
    path = _path_events(con, key, rank, max_events)
    events.extend(path)
    # the path's track is its name and then its slices, each list cut at max_events
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run_id": run_id, "rank": rank, "step": step,
                          "truncated": len(rows) >= max_events or len(path) > max_events}}


def _path_events(con, key: dict, rank: int, max_events: int) -> list[dict[str, Any]]:
    """The window's critical path as slices on a "critical path" track, each named after the
    event it charges its time to and categorised by what bounds it (cpu, gpu_compute, ...)."""
    edges = con.execute(PATH_SQL, {**key, "limit": max_events}).fetchall()
    if not edges:
        return []
    track = [{"ph": "M", "name": "thread_name", "pid": rank, "tid": PATH_TID, "args": {"name": "critical path"}}]
    return track + [
        {"ph": "X", "cat": bound, "name": name or kind, "pid": rank, "tid": PATH_TID, "ts": ts, "dur": dur,
         "args": {"edge": kind, "bound": bound, "on": track_name}}
        for kind, bound, name, track_name, ts, dur in edges]

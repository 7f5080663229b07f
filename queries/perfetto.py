"""One rank's GPU events in one profiler step as Chrome-trace JSON, for "Open in Perfetto"."""
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
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run_id": run_id, "rank": rank, "step": step,
                          "truncated": len(rows) >= max_events}}

"""HTA's temporal breakdown of one rank's GPU events (interval unions), computed once at ingest."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from polytrace.columns import from_list

COLUMNS = ("rank", "step", "include_last_step", "kernel_time_us", "busy_us", "compute_us")


def merged(ts: np.ndarray, end: np.ndarray) -> tuple[float, float]:
    """HTA's merge_kernel_intervals over intervals [ts, end) sorted by ts: (busy, span).

    An interval that starts after every earlier one has ended opens a group; a group reaches
    its latest end. busy is the summed length of the groups, span from the first start to
    the last group's end. For intervals of positive length busy is their union; an interval
    that rounding to whole us left with end < ts counts negative, as in HTA.
    """
    if not len(ts):
        return 0.0, 0.0
    opens = np.empty(len(ts), dtype=bool)
    opens[0] = True
    opens[1:] = ts[1:] > np.maximum.accumulate(end)[:-1]
    starts = np.flatnonzero(opens)
    ends = np.maximum.reduceat(end, starts)
    return float((ends - ts[starts]).sum()), float(ends[-1] - ts[0])


def _row(ts: np.ndarray, end: np.ndarray, compute: np.ndarray) -> tuple[float, float, float]:
    busy, span = merged(ts, end)
    return span, busy, merged(ts[compute], end[compute])[0]


def step_time_rows(rank: int, ts: np.ndarray, dur: np.ndarray, compute: np.ndarray, step: np.ndarray,
                   has_step: np.ndarray, excluded: np.ndarray, last_step: int | None = None) -> list[tuple]:
    """gpu_step_time rows of one rank: whole trace (step None) and per step, with and without
    the events HTA excludes by default. Arrays are aligned and sorted by ts. Without them, the
    last step (`last_step`, when HTA drops one) has no row of its own: what HTA keeps of it is
    what its CPU launched before the GPU's own last step marker began, a sliver of a step."""
    rows = []
    end = ts + dur
    for include in (False, True):
        keep = np.ones(len(ts), dtype=bool) if include else ~excluded
        if not keep.any():
            continue
        rows.append((rank, None, include, *_row(ts[keep], end[keep], compute[keep])))
        idx = np.flatnonzero(keep & has_step & (include or step != last_step))
        idx = idx[np.argsort(step[idx], kind="stable")]  # by step, still by ts within a step
        bounds = np.flatnonzero(np.diff(step[idx])) + 1
        for group in np.split(idx, bounds) if len(idx) else []:
            rows.append((rank, int(step[group[0]]), include, *_row(ts[group], end[group], compute[group])))
    return rows


def step_time_table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[] for _ in COLUMNS]
    types = (pa.int32(), pa.int32(), pa.bool_(), pa.float64(), pa.float64(), pa.float64())
    return pa.table({name: from_list(list(col), t) for name, col, t in zip(COLUMNS, cols, types)})


def fill_step_time(con, run_id: str) -> None:
    """gpu_step_time of a run from its stored gpu_events, as the kineto parser computes it at
    ingest (per trace file, times rounded inward to whole us, as HTA reads them), less what
    gpu_events does not keep: cuda_sync waits and events on streams past the INTEGER range."""
    from polytrace import store  # where used: parse workers import this module, not DuckDB

    # the step of each rank's last window, when it has two or more (the one HTA drops)
    last = dict(con.execute("SELECT rank, arg_max(step, ts_us) FROM profiler_steps WHERE run_id = ? "
                            "GROUP BY rank HAVING count(*) >= 2", [run_id]).fetchall())
    rows = []
    for rank, trace in con.execute("SELECT DISTINCT rank, trace_start_us FROM gpu_events WHERE run_id = ? "
                                   "ORDER BY 1, 2", [run_id]).fetchall():
        ev = con.execute(
            "SELECT ceil(ts_us), floor(ts_us + dur_us) - ceil(ts_us), category = 'compute', coalesce(step, 0), "
            "step IS NOT NULL, hta_excluded FROM gpu_events WHERE run_id = ? AND rank = ? "
            "AND trace_start_us IS NOT DISTINCT FROM ? ORDER BY ts_us", [run_id, rank, trace]).fetchnumpy()
        rows += step_time_rows(rank, *(np.asarray(a) for a in ev.values()), last.get(rank))
    with store.registered(con, "_step_time", step_time_table(rows)):
        con.execute("INSERT INTO gpu_step_time BY NAME SELECT *, ? AS run_id FROM _step_time", [run_id])

"""One rank's GPU trace as compact columns, whatever profiler wrote it (Kineto JSON, an Nsight
Systems export), and the canonical tables built from it: gpu_events with each event's profiler
step (as HTA assigns it), kernel_names, profiler_steps, gpu_ranks, and HTA's temporal breakdown
(gpu_step_time)."""
from __future__ import annotations

import hashlib
import re
from array import array
from dataclasses import dataclass, field
from pathlib import PurePath

import numpy as np
import pyarrow as pa

from polytrace.columns import from_list, from_numpy
from polytrace.ingest.contract import IngestError, Parsed
from polytrace.ingest import critical_path
from polytrace.ingest.critical_path import Timeline
from polytrace.ingest.gpu_time import step_time_rows, step_time_table
from polytrace.ingest.rl_stages import stage_of

# What a device-side event is: kernels (and MTIA ops), memory events (memcpy, memset) and MTIA
# events land in gpu_events; sync waits only count in HTA's breakdown (gpu_step_time), as HTA
# counts them. LAUNCH is the CPU side of a device event, OTHER anything else.
KERNEL, MEMORY_EVENT, SYNC, LAUNCH, OTHER = range(5)
CATEGORIES = ("compute", "communication", "memory")
_CATEGORY_NAMES = np.array(CATEGORIES, dtype=object)
COMPUTE, COMMUNICATION, MEMORY = range(3)
_COMM_NAME = re.compile(r"nccl|rccl", re.IGNORECASE)
# MTIA names its memory transfers dma*
_MEMORY_NAME = re.compile(r"dma")
# Not compute in HTA's breakdown (hta/utils/utils.py get_kernel_type): NCCL kernels, memcpys,
# memsets, syncs and MTIA dma, by name
_HTA_NOT_COMPUTE = re.compile(r"nccl.*Kernel|.*Memcpy|Memset|.*Sync|dma")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# A trace's times are us after its origin: baseTimeNanoseconds (Kineto since PyTorch 2.1, the
# wall clock floored to a quarter year, libkineto output_json.h ChromeTraceBaseTime), the Unix
# epoch (older Kineto; nsys with its session start), or a clock of its own (origin unknown).
# A time past 2000-01-01 in us since the epoch cannot be an offset from a quarter-year base, nor
# a host's uptime.
EPOCH_FROM_US = 946_684_800e6


@dataclass
class RankTrace:
    """One rank's trace as compact columns, before steps are assigned."""

    source: str
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    stream: array = field(default_factory=lambda: array("q"))
    kind: array = field(default_factory=lambda: array("b"))
    name: array = field(default_factory=lambda: array("l"))
    corr: array = field(default_factory=lambda: array("q"))
    stored: array = field(default_factory=lambda: array("b"))  # in gpu_events (else HTA's breakdown only)
    launch_corr: array = field(default_factory=lambda: array("q"))
    launch_ts: array = field(default_factory=lambda: array("d"))
    last_gpu_step: float = float("-inf")  # start of the last gpu_user_annotation ProfilerStep
    steps: list[tuple[int, float, float]] = field(default_factory=list)
    # annotated ranges (Kineto user annotations, NVTX ranges): (process, start us, duration us, name)
    ranges: list[tuple[int, float, float, str]] = field(default_factory=list)
    process: array = field(default_factory=lambda: array("q"))  # each event's process, where ranges need it (else 0)
    # every event the critical path reads (Kineto only)
    timeline: Timeline = field(default_factory=Timeline)
    # Kineto [memory] events: (ts us, allocated bytes, reserved bytes, device type, device id)
    memory: list[tuple[float, int, int, int, int | None]] = field(default_factory=list)
    skipped_memory: int = 0
    names: dict[str, tuple[int, int, bool]] = field(default_factory=dict)  # name -> (index, category, HTA compute)
    events: int = 0
    skipped: int = 0
    rank: int = 0
    rank_from: str = "default"
    world_size: int | None = None
    device: str | None = None
    # what ts = 0 is: the Unix time (ns) of the file's origin, and where that came from (EPOCH_FROM_US)
    clock: str = "own"
    clock_origin_ns: int | None = None


def as_int(value, default: int | None = None, limit: int = INT64_MAX) -> int | None:
    """An id written as a number or a string; `default` when it is neither or is beyond +-limit."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        return default
    return n if -limit - 1 <= n <= limit else default


def count(value, what: str, source: str) -> int | None:
    """A rank, world size or step number: None when absent, an IngestError when not in 0..2**31-1."""
    n = as_int(value, limit=2**4000)
    if n is not None and not 0 <= n <= INT32_MAX:
        raise IngestError(source, f"{what} {str(value)[:40]} is out of range")
    return n



def origin_ns(value, what: str, source: str) -> int:
    """A clock origin in ns since the Unix epoch; an IngestError when it is not one."""
    n = as_int(value, limit=2**62)
    if n is None or n < 0:
        raise IngestError(source, f"{what} {str(value)[:40]} is not a time in ns since the Unix epoch")
    return n


def on_epoch_if_absolute(trace: RankTrace) -> None:
    """A trace without an origin whose times are us since the Unix epoch: the epoch is its origin."""
    first = trace.ts[0] if trace.ts else trace.steps[0][1] if trace.steps else None
    if first is not None and first >= EPOCH_FROM_US:
        trace.clock, trace.clock_origin_ns = "Unix epoch", 0


def rank_in_file_name(trace: RankTrace) -> None:
    """Take the rank from the trace's file name (rank3, worker_3, ...) when it has one."""
    base = PurePath(trace.source).name
    m = _RANK_IN_NAME.search(base)
    if m:
        trace.rank, trace.rank_from = count(m.group(1), "rank in the file name", base), "file name"


def extend(trace: RankTrace, ts: np.ndarray, dur: np.ndarray, stream: np.ndarray, category: np.ndarray,
           name_index: np.ndarray, corr: np.ndarray, stored: np.ndarray) -> None:
    """Append device events given as aligned arrays: start and duration (us), stream (-1 when not
    stored), gpu_events category, index into trace.names, correlation id, stored in gpu_events."""
    trace.events += len(ts)
    for column, values, dtype in ((trace.ts, ts, np.float64), (trace.dur, dur, np.float64),
                                  (trace.stream, stream, np.int64), (trace.kind, category, np.int8),
                                  (trace.name, name_index, np.int64), (trace.corr, corr, np.int64),
                                  (trace.stored, stored, np.int8)):
        column.frombytes(np.ascontiguousarray(values, dtype=dtype).tobytes())


def known_name(trace: RankTrace, name: str, kind: int) -> tuple[int, int, bool]:
    """The name's (index in the trace, gpu_events category, counts as compute in HTA's breakdown)."""
    known = trace.names.get(name)
    if known is None:
        known = trace.names[name] = (len(trace.names), _category(name, kind), _HTA_NOT_COMPUTE.match(name) is None)
    return known


def _category(name: str, kind: int) -> int:
    """gpu_events.category of a kernel by its name: NCCL/RCCL is communication, MTIA dma memory."""
    if _COMM_NAME.search(name):
        return COMMUNICATION
    return MEMORY if kind == MEMORY_EVENT or _MEMORY_NAME.match(name) else COMPUTE



def name_id(name: str) -> int:
    """Stable 63-bit id of a kernel name, the same in every file, so ranks parsed apart agree."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") >> 1


def _launch_times(trace: RankTrace, ts: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each GPU event's CPU launch time (its runtime call, by correlation id), or its own ts
    when the launch is not in the trace; and whether the launch was found."""
    lc = np.frombuffer(trace.launch_corr, dtype=np.int64)
    if not len(lc):
        return ts, np.zeros(len(ts), dtype=bool)
    order = np.argsort(lc, kind="stable")
    lc, lt = lc[order], np.frombuffer(trace.launch_ts, dtype=np.float64)[order]
    pos = np.minimum(np.searchsorted(lc, corr), len(lc) - 1)
    hit = (lc[pos] == corr) & (corr >= 0)
    return np.where(hit, lt[pos], ts), hit


def _events_table(trace: RankTrace) -> tuple[pa.Table, list[tuple], pa.Table]:
    """GPU events sorted by start, each with the step whose window holds its launch, and the
    rank's gpu_step_time rows (HTA's temporal breakdown).

    Like HTA, a GPU event belongs to the ProfilerStep window that holds its CPU launch
    (its own start when the launch is not in the trace). With two or more windows HTA
    keeps only events launched before the last window's start (an event with no
    correlation id: that started before it): the others are `hta_excluded`, and so are
    events whose launch is not in the trace. HTA reads fractional timestamps rounded inward
    to whole microseconds (start up, end down), for these comparisons and for the breakdown.
    """
    order = np.argsort(np.frombuffer(trace.ts, dtype=np.float64), kind="stable")
    ts = np.frombuffer(trace.ts, dtype=np.float64)[order]
    dur = np.frombuffer(trace.dur, dtype=np.float64)[order]
    corr = np.frombuffer(trace.corr, dtype=np.int64)[order]
    launch, launched = _launch_times(trace, ts, corr)
    steps = sorted(trace.steps, key=lambda s: s[1])
    n = len(ts)
    if steps:
        sn = np.array([s[0] for s in steps], dtype=np.int32)
        st = np.array([s[1] for s in steps], dtype=np.float64)
        se = st + np.array([s[2] for s in steps], dtype=np.float64)
        idx = np.searchsorted(st, launch, side="right") - 1
        has_step = (idx >= 0) & (launch < se[np.maximum(idx, 0)])
        step = sn[np.maximum(idx, 0)]
    else:
        step, has_step = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=bool)
    if len(steps) >= 2:
        last = np.ceil(max(st[-1], trace.last_gpu_step))
        excluded = np.where(corr >= 0, ~launched | (np.ceil(launch) >= last), np.ceil(ts) >= last)
    else:
        excluded = np.zeros(n, dtype=bool)
    kind = np.frombuffer(trace.kind, dtype=np.int8)[order]
    name_index = np.frombuffer(trace.name, dtype=np.int64)[order]
    hta_compute = np.array([known[2] for known in trace.names.values()], dtype=bool)[name_index] \
        if n else np.zeros(0, dtype=bool)
    start, end = np.ceil(ts), np.floor(ts + dur)
    rows = step_time_rows(trace.rank, start, end - start, hta_compute, step, has_step, excluded,
                          int(sn[-1]) if len(steps) >= 2 else None)
    keep = np.frombuffer(trace.stored, dtype=np.int8)[order].astype(bool)
    kept_ts = ts[keep]
    ids = np.array([name_id(s) for s in trace.names], dtype=np.int64)
    table = pa.table({
        "rank": from_numpy(np.full(int(keep.sum()), trace.rank, dtype=np.int32)),
        "step": from_numpy(step[keep], has_step[keep]),
        "stream": from_numpy(np.frombuffer(trace.stream, dtype=np.int64)[order][keep].astype(np.int32)),
        # not cast from a dictionary: Array.cast imports pyarrow.compute (0.07 CPU-s, once a process)
        "category": from_list(_CATEGORY_NAMES[kind[keep]].tolist(), pa.string()),
        "name_id": from_numpy(ids[name_index[keep]] if n else ids[:0]),
        "ts_us": from_numpy(kept_ts),
        "dur_us": from_numpy(dur[keep]),
        "hta_excluded": from_numpy(excluded[keep]),
        "trace_start_us": from_numpy(np.full(len(kept_ts), kept_ts[0] if len(kept_ts) else 0.0)),
    })
    process = np.frombuffer(trace.process, dtype=np.int64)[order] if len(trace.process) else np.zeros(n, np.int64)
    launched_kept = keep & launched
    ranges = range_table(trace, launch[launched_kept], ts[launched_kept], dur[launched_kept],
                         kind[launched_kept], process[launched_kept])
    return table, rows, ranges


RANGE_COLUMNS = {"rank": pa.int32(), "name": pa.string(), "stage": pa.string(), "ts_us": pa.float64(),
                 "dur_us": pa.float64(), "gpu_events": pa.int64(), "gpu_us": pa.float64(),
                 "communication_us": pa.float64(), "memory_us": pa.float64(), "gpu_start_us": pa.float64(),
                 "gpu_end_us": pa.float64()}


def range_table(trace: RankTrace, launch: np.ndarray, ts: np.ndarray, dur: np.ndarray, category: np.ndarray,
                process: np.ndarray) -> pa.Table:
    """gpu_ranges of the trace: each annotated range with the stored GPU events its process
    launched inside it (CPU launch in [start, end)), as nsys projects a range onto the GPU."""
    cols: dict[str, list] = {k: [] for k in RANGE_COLUMNS}
    by_process = {}
    for p in np.unique(process).tolist():
        mine = process == p
        order = np.argsort(launch[mine], kind="stable")
        by_process[p] = tuple(a[mine][order] for a in (launch, ts, dur, category))
    nothing = (np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, np.int8))
    for p, start, length, name in trace.ranges:
        at, t, d, c = by_process.get(p, nothing)
        lo, hi = np.searchsorted(at, [start, start + length]).tolist()
        t, d, c = t[lo:hi], d[lo:hi], c[lo:hi]
        for key, value in (("rank", trace.rank), ("name", name), ("stage", stage_of(name)), ("ts_us", start),
                           ("dur_us", length), ("gpu_events", hi - lo), ("gpu_us", float(d.sum())),
                           ("communication_us", float(d[c == COMMUNICATION].sum())),
                           ("memory_us", float(d[c == MEMORY].sum())),
                           ("gpu_start_us", float(t.min()) if hi > lo else None),
                           ("gpu_end_us", float((t + d).max()) if hi > lo else None)):
            cols[key].append(value)
    return pa.table({k: from_list(v, RANGE_COLUMNS[k]) for k, v in cols.items()})


# c10::DeviceType of a [memory] event (c10/core/DeviceType.h); ROCm's HIP devices say CUDA
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia"}
# PyTorch's memory categories, in its own index order (torch/profiler/_memory_profiler.py _CATEGORY_TO_COLORS)
MEMORY_COLUMNS = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail",
                  "unknown")


def _device(kind: int, index: int | None) -> str:
    name = _DEVICE_TYPES.get(kind, f"device{kind}")
    return name if index is None or index < 0 else f"{name}:{index}"


def memory_table(traces: list[RankTrace]) -> pa.Table:
    """gpu_memory of Kineto [memory] events: per rank and device, the allocator's totals after
    each time (the last event's where several share one), all unknown: no category is known."""
    rows = []
    for t in traces:
        last = {}
        for ts, allocated, reserved, kind, index in sorted(t.memory, key=lambda m: m[0]):
            last[(_device(kind, index), ts)] = (allocated, reserved)
        rows += [(t.rank, device, ts, *values) for (device, ts), values in last.items()]
    return uncategorised_memory(rows)


def uncategorised_memory(rows: list[tuple]) -> pa.Table:
    """gpu_memory of (rank, device, ts us, allocated bytes, reserved bytes) rows, from a source
    that names no category: every byte unknown."""
    unknown = [None] * len(rows)
    columns = {"rank": from_list([r[0] for r in rows], pa.int32()),
               "device": from_list([r[1] for r in rows], pa.string()),
               "ts_us": from_list([r[2] for r in rows], pa.float64())}
    columns |= {f"{c}_bytes": from_list(unknown, pa.int64()) for c in MEMORY_COLUMNS[:-1]}
    columns |= {name: from_list([r[3] for r in rows], pa.int64()) for name in ("unknown_bytes", "total_bytes")}
    columns["reserved_bytes"] = from_list([r[4] for r in rows], pa.int64())
    return pa.table(columns)


def tables(traces: list[RankTrace]) -> dict[str, pa.Table]:
    built = [_events_table(t) for t in traces]
    names = {}
    for t in traces:  # the names of stored events (sync waits only count in the breakdown)
        used = set(np.frombuffer(t.name, dtype=np.int64)[np.frombuffer(t.stored, dtype=np.int8) == 1].tolist())
        for i, s in enumerate(t.names):
            if i in used:
                names.setdefault(name_id(s), s)
    steps = [(t.rank, s, ts, dur) for t in traces for s, ts, dur in t.steps]
    return {
        "gpu_events": pa.concat_tables([table for table, _, _ in built]),
        "gpu_step_time": step_time_table([row for _, rows, _ in built for row in rows]),
        "gpu_ranges": pa.concat_tables([ranges for _, _, ranges in built]),
        "gpu_memory": memory_table(traces),
        **critical_path.tables([(t.rank, path) for t in traces for path in critical_path.critical_paths(t.timeline)]),
        "kernel_names": pa.table({"name_id": from_list(list(names), pa.int64()),
                                  "name": from_list(list(names.values()), pa.string())}),
        "profiler_steps": pa.table({
            "rank": from_list([s[0] for s in steps], pa.int32()),
            "step": from_list([s[1] for s in steps], pa.int32()),
            "ts_us": from_list([s[2] for s in steps], pa.float64()),
            "dur_us": from_list([s[3] for s in steps], pa.float64())}),
        "gpu_ranks": pa.table({
            "rank": from_list([t.rank for t in traces], pa.int32()),
            "source": from_list([t.source for t in traces], pa.string()),
            "rank_from": from_list([t.rank_from for t in traces], pa.string()),
            "world_size": from_list([t.world_size for t in traces], pa.int32()),
            "device": from_list([t.device for t in traces], pa.string()),
            "trace_events": from_list([t.events for t in traces], pa.int64()),
            "gpu_events": from_list([sum(t.stored) for t in traces], pa.int64()),
            "profiler_steps": from_list([len(t.steps) for t in traces], pa.int32()),
            "clock": from_list([t.clock for t in traces], pa.string()),
            "clock_origin_ns": from_list([t.clock_origin_ns for t in traces], pa.int64())}),
    }


def warnings(trace: RankTrace) -> list[str]:
    out = []
    if trace.rank_from == "default":
        out.append(f"{trace.source}: no distributedInfo.rank and no rank in the file name; using rank 0")
    if not any(trace.stored):
        out.append(f"{trace.source}: no GPU kernels, memcpys or memsets (a CPU-only trace?); "
                   f"loaded {len(trace.steps)} profiler step(s) and {len(trace.memory)} [memory] event(s) only")
    if trace.skipped:
        out.append(f"{trace.source}: skipped {trace.skipped} GPU event(s) without ts, dur or stream")
    if trace.skipped_memory:
        out.append(f"{trace.source}: skipped {trace.skipped_memory} [memory] event(s) without Total Allocated, "
                   "Total Reserved or Device Type")
    return out



def after_load(con, run_id: str, deferred: list) -> Parsed:
    """Across the run's rank files: GPUs as ranks seen (when no file gives its world size),
    and ranks claimed by more than one file."""
    ranks = con.execute("SELECT rank, count(*) FROM gpu_ranks WHERE run_id = ? GROUP BY rank ORDER BY rank",
                        [run_id]).fetchall()
    dups = [rank for rank, files in ranks if files > 1]
    warnings = [f"rank(s) {dups} come from more than one trace file: each file's profiled time counts "
                "for its rank, and the time between two files is not idle time"]
    return Parsed(run={"n_gpus": len(ranks)}, warnings=warnings if dups else [])


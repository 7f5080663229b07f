"""PyTorch profiler (Kineto) Chrome-trace JSON: device kernels, memcpys and memsets (CUDA, ROCm, MTIA) per rank and
profiler step, and HTA's temporal breakdown of them."""
from __future__ import annotations

import json
import re
import zlib
from operator import attrgetter
from pathlib import Path
from typing import Annotated, BinaryIO

import msgspec

from polytrace.ingest import critical_path
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.gpu_trace import (INT32_MAX, INT64_MAX, KERNEL, LAUNCH, MEMORY, MEMORY_EVENT, OTHER, SYNC,
                                        RankTrace, after_load, as_int, count, known_name, on_epoch_if_absolute,
                                        origin_ns, rank_in_file_name, tables, warnings)
from polytrace.ingest.sources import Budget, max_inflate_bytes, name_of, open_stream
from polytrace.ingest.trace_events import EventStream

# HTA 0.5's device-event categories (hta/common/types.py GPU_EVENT_CATEGORY_PATTERN, and the
# kernel categories of its idle-time breakdown): CUDA and ROCm kernels ("kernel"), memcpys and
# memsets ("gpu_memcpy", "gpu_memset"), MTIA's "mtia_ccp_events", and "cuda_sync" waits. Older
# PyTorch wrote "Kernel", "Memcpy" and "Memset".
_DEVICE_CATS = [(re.compile(r"gpu_mem|Memcpy$|Memset$"), MEMORY_EVENT), (re.compile(r"cuda_sync"), SYNC),
                (re.compile(r".*kernel|Kernel$|mtia_ccp_events"), KERNEL)]
# the CPU side of a device event (its launch, by correlation id); mtia_runtime is MTIA's
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver", "mtia_runtime"}
_STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")


def role(cat: str) -> int:
    """What an event of this category is: a device kernel, memory event or sync, a launch, or other."""
    if cat in LAUNCH_CATS:
        return LAUNCH
    return next((r for pattern, r in _DEVICE_CATS if pattern.match(cat)), OTHER)


# Any int64 decodes: CPU-side sync events carry stream 2**32 - 1. An event whose stream does
# not fit the INTEGER column counts in HTA's breakdown only, never stored.
Stream = Annotated[int, msgspec.Meta(ge=-(2**63), le=INT64_MAX)]
Correlation = Annotated[int, msgspec.Meta(ge=-(2**63), le=INT64_MAX)]


class Args(msgspec.Struct, gc=False):
    stream: Stream = -1
    correlation: Correlation = -1
    # a cuda_sync event's (Event Sync, Stream Wait Event): the stream and event record it waits on
    wait_on_stream: Stream = -1
    wait_on_record: Correlation = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    # a [memory] event's (profile_memory=True): the allocator's totals after it, and its device
    allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")


class Event(msgspec.Struct, gc=False):
    cat: str = ""
    name: str = ""
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None
    pid: int | str | None = None
    tid: int | str | None = None


class LenientArgs(msgspec.Struct, gc=False):
    stream: Stream | str | None = None
    correlation: Correlation | str | None = None
    wait_on_stream: Stream | str | None = None
    wait_on_record: Correlation | str | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    allocated: int | str | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | str | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | str | None = msgspec.field(default=None, name="Device Type")
    device_id: int | str | None = msgspec.field(default=None, name="Device Id")


class LenientEvent(msgspec.Struct, gc=False):
    """Decodes chunks that Event rejects, e.g. a stream written as a string (slower)."""

    cat: str = ""
    name: str = ""
    ts: float | None = None
    dur: float | None = None
    args: LenientArgs | None = None
    pid: int | str | None = None
    tid: int | str | None = None


class DistributedInfo(msgspec.Struct):
    rank: int | str | None = None
    world_size: int | str | None = None


class Device(msgspec.Struct):
    name: str | None = None


class Meta(msgspec.Struct):
    distributedInfo: DistributedInfo | None = None
    deviceProperties: list[Device] | None = None
    baseTimeNanoseconds: int | float | str | None = None



def _collect(trace: RankTrace, events: list) -> None:
    """Append the events that matter to the trace's columns; skip the rest quickly.

    Device events are kept with whether gpu_events stores them; like HTA, an event of any
    other category that carries a stream (a Triton cpu_op, say) counts in the breakdown too.
    """
    names, roles = trace.names, _ROLES
    trace.events += len(events)
    on_path = []
    for e in events:
        cat = e.cat
        kind = roles.get(cat)
        if kind is None:
            kind = roles[cat] = role(cat)
        a = e.args
        if cat in _PATH_KINDS and e.dur is not None and e.ts is not None:
            on_path.append(e)
        if kind == LAUNCH:
            if a is not None and e.ts is not None and e.dur is not None:
                corr = a.correlation if a.correlation.__class__ is int else as_int(a.correlation, -1)
                if corr >= 0:
                    trace.launch_corr.append(corr)
                    trace.launch_ts.append(e.ts)
            continue
        if kind == OTHER:
            if e.name.startswith("ProfilerStep"):
                m = _STEP_NAME.match(e.name)
                if m and e.ts is not None and e.dur is not None:
                    if cat != "gpu_user_annotation":
                        trace.steps.append((count(m.group(1), "ProfilerStep", trace.source), e.ts, e.dur))
                    elif e.ts > trace.last_gpu_step:  # HTA's last-step cutoff counts these too
                        trace.last_gpu_step = e.ts
                continue
            if cat == "user_annotation" and e.ts is not None and e.dur is not None:
                trace.ranges.append((0, e.ts, e.dur, e.name))
            elif e.name == "[memory]" and a is not None and e.ts is not None:
                _memory(trace, e.ts, a)
                continue
            if a is None or a.stream == -1:
                continue
        stream = -1 if a is None else a.stream if a.stream.__class__ is int else as_int(a.stream, -1)
        if stream == -1 or e.ts is None or e.dur is None or e.dur < 0:
            if kind != OTHER:
                trace.skipped += 1
            continue
        # HTA counts any stream but -1; the INTEGER column holds 0..2**31-1 (a CPU-side
        # Context Sync says 2**32 - 1), so other streams count only in the breakdown
        stored = kind <= MEMORY_EVENT and 0 <= stream <= INT32_MAX
        known = names.get(e.name) or known_name(trace, e.name, kind)
        trace.ts.append(e.ts)
        trace.dur.append(e.dur)
        trace.stream.append(stream if stored else -1)
        trace.kind.append(MEMORY if kind == MEMORY_EVENT else known[1])
        trace.name.append(known[0])
        trace.corr.append(a.correlation if a.correlation.__class__ is int else as_int(a.correlation, -1))
        trace.stored.append(stored)
    if on_path:
        _on_timeline(trace.timeline, on_path)


_ROLES: dict[str, int] = {}
# the events the critical path reads, and what each is to it (python_function events are left
# out: they would only re-parent operators on the call tree)
_PATH_KINDS = {"cpu_op": critical_path.CPU_OP, "cuda_runtime": critical_path.RUNTIME,
               "cuda_driver": critical_path.RUNTIME, "user_annotation": critical_path.ANNOTATION,
               "kernel": critical_path.GPU, "gpu_memcpy": critical_path.GPU, "gpu_memset": critical_path.GPU,
               "Kernel": critical_path.GPU, "Memcpy": critical_path.GPU, "Memset": critical_path.GPU,
               "cuda_sync": critical_path.SYNC}


def _on_timeline(timeline: critical_path.Timeline, events: list) -> None:
    """Add one chunk's events that the critical path reads, column by column."""
    args = [e.args for e in events]
    timeline.extend([_PATH_KINDS[e.cat] for e in events], [e.name for e in events], [e.pid for e in events],
                    [e.tid for e in events], [e.ts for e in events], [e.dur for e in events],
                    *(_ids(args, name, events[0].__class__ is Event)
                      for name in ("stream", "correlation", "wait_on_stream", "wait_on_record")))


def _ids(args: list, name: str, typed: bool) -> list[int]:
    """An argument of each event, -1 where absent; Event's chunks hold ints, LenientEvent's anything."""
    get = attrgetter(name)
    values = [-1 if a is None else get(a) for a in args]
    return values if typed else [v if v.__class__ is int else as_int(v, -1) for v in values]


def _memory(trace: RankTrace, ts: float, a) -> None:
    values = [as_int(v) for v in (a.allocated, a.reserved, a.device_type, a.device_id)]
    if None in values[:3]:
        trace.skipped_memory += 1
    else:
        trace.memory.append((ts, *values))


def read_trace(stream: BinaryIO, source: str, budget: Budget, path: Path) -> RankTrace:
    """Decode one rank's trace document from a byte stream; `source` names it in the data."""
    trace = RankTrace(source)
    events = EventStream(stream, path, (Event, LenientEvent), Meta, budget)
    for chunk in events:
        _collect(trace, chunk)
    _apply_meta(trace, events.meta)
    return trace


def _apply_meta(trace: RankTrace, metas: list[Meta]) -> None:
    for meta in metas:
        info = meta.distributedInfo
        rank = None if info is None else count(info.rank, "distributedInfo.rank", trace.source)
        if rank is not None and trace.rank_from == "default":
            trace.rank, trace.rank_from = rank, "distributedInfo"
        if info is not None and trace.world_size is None:
            trace.world_size = count(info.world_size, "distributedInfo.world_size", trace.source)
        if meta.deviceProperties and trace.device is None:
            trace.device = meta.deviceProperties[0].name
        if meta.baseTimeNanoseconds is not None and trace.clock_origin_ns is None:
            trace.clock = "baseTimeNanoseconds"
            trace.clock_origin_ns = origin_ns(meta.baseTimeNanoseconds, "baseTimeNanoseconds", trace.source)
    if trace.clock_origin_ns is None:
        on_epoch_if_absolute(trace)
    if trace.rank_from == "default":
        rank_in_file_name(trace)


def _read_guarded(stream: BinaryIO, path: Path, source: str) -> RankTrace:
    try:
        return read_trace(stream, source, Budget(max_inflate_bytes()), path)
    except (OSError, EOFError, zlib.error) as e:
        raise IngestError(path, f"corrupt or truncated data ({e})") from None



def parse(path: Path) -> Parsed:
    with open_stream(path) as f:
        trace = _read_guarded(f, path, name_of(path))
    if not trace.events:
        raise IngestError(path, "traceEvents is empty")
    if not any(trace.stored) and not trace.steps and not trace.memory:
        raise IngestError(path, "no GPU events, no ProfilerStep windows and no [memory] events; nothing to load")
    return Parsed(tables=tables([trace]), run={"n_gpus": trace.world_size}, warnings=warnings(trace))



def sniff(head: bytes, name: str) -> bool:
    text = head.lstrip()
    return text.startswith(b"{") and (
        b'"traceEvents"' in head or (b'"schemaVersion"' in head and b'"deviceProperties"' in head))


def sample() -> Sample:
    """Rank 0 of two: one profiler step with a GEMM, an all-reduce and a host-to-device copy."""
    trace = {
        "schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2},
        "deviceProperties": [{"name": "H100"}],
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 100, "dur": 1000},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5,
             "args": {"correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 120, "dur": 50,
             "args": {"stream": 7, "correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "ncclAllReduce", "ts": 200, "dur": 30,
             "args": {"stream": 13, "correlation": 8}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 300, "dur": 10,
             "args": {"stream": 7, "correlation": 9}},
        ],
    }
    return Sample.file("rank0.json", json.dumps(trace).encode())


FORMAT = Format(
    name="kineto",
    priority=60,
    sniff=sniff,
    parse=parse,
    sample=sample,
    after_load=after_load,
    # its critical paths (a graph per profiler step): 39 MB of JSON per CPU-second (bench/kineto.py,
    # 2026-12-07), where the multi-turn NDJSON ingest read 92 (issue 42's measure)
    parse_cost=2.5,
    description="PyTorch profiler (Kineto) Chrome-trace JSON, one file per rank (.json or .json.gz; "
                "archives of rank files too): GPU kernels, memcpys, memsets and ProfilerStep windows",
)

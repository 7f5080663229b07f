"""PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot("x.pickle")` after
`_record_memory_history()`), one file per rank: the caching allocator's allocated and reserved
bytes per device over time, into gpu_memory.

A snapshot is a pickle of plain data (torch/csrc/cuda/memory_snapshot.cpp writes dicts, lists,
tuples, strings and numbers, and no global). It is read with an unpickler that refuses every
global, so a file that names one (a class, a function such as os.system) is refused before
anything it names is looked up, let alone called.

The meaning of each field is PyTorch's (memory_snapshot.cpp, torch/cuda/memory.py _snapshot,
torch/cuda/_memory_viz.py trace): `device_traces[d]` lists device d's allocator actions in
order, each with `action`, `size` (bytes) and `time_us`; allocated bytes rise at `alloc` and
fall at `free_completed` (a `free_requested` block is still in use until its stream is done),
reserved bytes rise at `segment_alloc`/`segment_map` and fall at `segment_free`/`segment_unmap`.
The history starts when recording began: what was allocated before then is the end state
(`segments`: allocated_size and total_size per device) less the history's net change, added to
every point.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.gpu_trace import RankTrace, rank_in_file_name, uncategorised_memory
from polytrace.ingest.sources import name_of, open_stream

# Unpickled, a snapshot takes several times its size in Python objects (its stack frames above
# all): larger files are refused rather than read.
MAX_SNAPSHOT_BYTES = 128 * 2**20
ALLOCATED = {"alloc": 1, "free_completed": -1}
RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_PICKLE_PROTOCOLS = tuple(bytes([0x80, p]) for p in range(2, 6))


class _NotData(pickle.UnpicklingError):
    """The pickle asks for more than plain data."""


class _DataOnly(pickle.Unpickler):
    """Builds only containers, strings and numbers: any global is refused, never imported."""

    def find_class(self, module: str, name: str):
        raise _NotData(f"it names the global {module}.{name}; a memory snapshot is plain data")

    def persistent_load(self, pid):
        raise _NotData("it holds a persistent id; a memory snapshot is plain data")


def _load(path: Path) -> dict:
    with open_stream(path) as f:
        data = f.read(MAX_SNAPSHOT_BYTES + 1)
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise IngestError(path, f"a memory snapshot over {MAX_SNAPSHOT_BYTES >> 20} MiB is not read "
                                "(record fewer entries: _record_memory_history(max_entries=...))")
    stream = io.BytesIO(data)
    try:
        snapshot = _DataOnly(stream).load()
    except _NotData as e:
        raise IngestError(path, f"refused: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            MemoryError, OverflowError) as e:
        raise IngestError(path, f"not a readable pickle ({type(e).__name__}: {str(e)[:80]})") from None
    if stream.tell() != len(data):
        raise IngestError(path, f"{len(data) - stream.tell():,} bytes after the pickle's end: not one snapshot")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        raise IngestError(path, "not a memory snapshot: no device_traces list (was it written by "
                                "torch.cuda.memory._dump_snapshot?)")
    return snapshot


def _int(value, path: Path, what: str) -> int:
    if type(value) is not int or not -2**63 <= value < 2**63:
        raise IngestError(path, f"{what} is {str(value)[:40]!r}, not a 64-bit integer")
    return value


def _end_state(snapshot: dict, path: Path) -> dict[int, tuple[int, int]]:
    """Per device, the bytes allocated and reserved when the snapshot was taken."""
    end: dict[int, tuple[int, int]] = {}
    segments = snapshot.get("segments", [])
    if not isinstance(segments, list):
        raise IngestError(path, "segments is not a list")
    for segment in segments:
        if not isinstance(segment, dict):
            raise IngestError(path, "a segment is not a dict")
        device = _int(segment.get("device", 0), path, "a segment's device")
        allocated, reserved = end.get(device, (0, 0))
        end[device] = (allocated + _int(segment.get("allocated_size", 0), path, "a segment's allocated_size"),
                       reserved + _int(segment.get("total_size", 0), path, "a segment's total_size"))
    return end


def _device_rows(entries: list, device: int, end: tuple[int, int], path: Path) -> list[tuple]:
    """(time us, allocated, reserved) after each time of one device's history, the last where
    several share a time."""
    steps = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise IngestError(path, f"device {device}: a trace entry is not a dict")
        action = entry.get("action")
        sign_a, sign_r = ALLOCATED.get(action, 0), RESERVED.get(action, 0)
        if sign_a or sign_r:
            if "time_us" not in entry:
                raise IngestError(path, f"device {device}: trace entries without time_us (PyTorch before 2.1 "
                                        "wrote none); their times are unknown")
            size = _int(entry.get("size"), path, f"device {device}: an entry's size")
            steps.append((_int(entry["time_us"], path, f"device {device}: time_us"), sign_a * size, sign_r * size))
    allocated = end[0] - sum(s[1] for s in steps)
    reserved = end[1] - sum(s[2] for s in steps)
    rows: dict[int, tuple[int, int]] = {}
    for time_us, delta_a, delta_r in steps:
        allocated += delta_a
        reserved += delta_r
        rows[time_us] = (allocated, reserved)
    return [(float(t), a, r) for t, (a, r) in rows.items()]


def parse(path: Path) -> Parsed:
    snapshot = _load(path)
    end = _end_state(snapshot, path)
    trace = RankTrace(name_of(path))
    rank_in_file_name(trace)
    rows = []
    for device, entries in enumerate(snapshot["device_traces"]):
        if not isinstance(entries, list):
            raise IngestError(path, f"device_traces[{device}] is not a list")
        rows += [(f"cuda:{device}", *row) for row in _device_rows(entries, device, end.get(device, (0, 0)), path)]
    if not rows:
        raise IngestError(path, "the snapshot has no allocation history: record it with "
                                "torch.cuda.memory._record_memory_history() before _dump_snapshot")
    rows.sort(key=lambda r: (r[0], r[1]))
    warnings = [] if trace.rank_from != "default" else [
        f"{trace.source}: no rank in the file name (rank3, worker_3, ...); using rank 0"]
    negative = sum(1 for r in rows if r[2] < 0 or r[3] < 0)
    if negative:
        warnings.append(f"{trace.source}: {negative} point(s) below zero bytes: the history does not add up to "
                        "the snapshot's segments")
    table = uncategorised_memory([(trace.rank, *row) for row in rows])
    return Parsed(tables={"gpu_memory": table}, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    """A pickle whose first key is a snapshot's (segments, written first) or that names device_traces."""
    if not head.startswith(_PICKLE_PROTOCOLS):
        return False
    return b"device_traces" in head or (b"segments" in head[:64] and name.endswith((".pickle", ".pkl")))


def sample() -> Sample:
    """cuda:0 with 1 MiB allocated before recording; then a 2 MiB segment reserved, 512 KiB
    allocated in it, freed (requested, then completed)."""
    mib = 2**20
    snapshot = {
        "segments": [{"device": 0, "address": 0, "total_size": 3 * mib, "allocated_size": mib, "active_size": mib,
                      "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "blocks": []}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 1, "size": 2 * mib, "stream": 0, "time_us": 1_000, "frames": []},
            {"action": "alloc", "addr": 1, "size": mib // 2, "stream": 0, "time_us": 1_010, "frames": []},
            {"action": "free_requested", "addr": 1, "size": mib // 2, "stream": 0, "time_us": 1_020, "frames": []},
            {"action": "free_completed", "addr": 1, "size": mib // 2, "stream": 0, "time_us": 1_030, "frames": []},
        ]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
    }
    return Sample.file("snapshot_rank0.pickle", pickle.dumps(snapshot, protocol=2))


FORMAT = Format(
    name="memory-snapshot",
    priority=60,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot .pickle, read as plain data: "
                "any global is refused), one file per rank: allocated and reserved bytes per device over time",
)

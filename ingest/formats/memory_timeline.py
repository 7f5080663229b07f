"""PyTorch profiler memory timelines (`prof.export_memory_timeline("x.raw.json.gz")`, the raw form):
a JSON array of `[time_ns, action, bytes, category]` entries, one per allocation event of one
device, into gpu_memory: the bytes live per category after each time.

The meaning of each number is PyTorch's (torch/profiler/_memory_profiler.py
export_memory_timeline_raw): time in ns since the epoch, -1 for memory that existed before
profiling began; action 1 PREEXISTING, 2 CREATE, 3 INCREMENT_VERSION (written as the old
version's bytes freed then the new version's bytes taken, each under its own category), 4
DESTROY (bytes negative); category the index into _CATEGORY_TO_COLORS: parameter, optimizer
state, input, temporary, activation, gradient, autograd detail, unknown. The state after each
time is summed as HTA 0.5 does (hta/memory_analysis.py MemoryAnalysis._process_raw_events:
entries in file order, a new row at each change of time, the pre-existing row's time set to the
earliest real time); where two rows share a time, the later one (the state after both) is kept.
The file is read a block at a time and matched against the entry's exact shape.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from polytrace.columns import from_numpy
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.gpu_trace import MEMORY_COLUMNS as CATEGORIES, RankTrace, rank_in_file_name
from polytrace.ingest.sources import BLOCK_BYTES, blocks, name_of

_INT = rb"(-?\d{1,19})"
_ENTRY = re.compile(rb"\s*,?\s*\[\s*" + _INT + rb"\s*,\s*([1-4])\s*,\s*" + _INT + rb"\s*,\s*([0-7])\s*\]")
_HEAD = re.compile(rb"^\s*\[\s*\[\s*-?\d+\s*,\s*[1-4]\s*,\s*-?\d+\s*,\s*[0-7]\s*\]")
# below 2**63 with room for the float check's rounding
LIMIT = 9.2e18


def _entries(path: Path) -> np.ndarray:
    """The file's entries as an (n, 4) int64 array, checked: an opening bracket, entries
    separated by commas, a closing bracket, nothing else."""
    chunks, rest, opened = [], b"", False
    for block in blocks(path, BLOCK_BYTES):
        data = rest + block
        if not opened:
            stripped = data.lstrip()
            if not stripped:
                continue
            if not stripped.startswith(b"["):
                raise IngestError(path, "not a memory timeline: it does not open with [")
            data, opened = stripped[1:], True
        # anchored at each entry's end: a search (finditer) would retry from every byte of a long
        # run of whitespace, each try scanning the rest of the run (quadratic)
        pos, rows = 0, []
        while m := _ENTRY.match(data, pos):
            rows.append(m.groups())
            pos = m.end()
        if len(data) - pos > 4096:
            raise IngestError(path, f"not a [time, action, bytes, category] entry near {data[pos:pos + 40]!r}")
        rest = data[pos:]
        if rows:
            chunks.append(_checked(rows, path))
    if not opened or rest.strip() != b"]":
        raise IngestError(path, f"the timeline does not end with ] (left: {rest.strip()[:40]!r})")
    return np.concatenate(chunks) if chunks else np.zeros((0, 4), dtype=np.int64)


def _checked(rows: list[tuple[bytes, ...]], path: Path) -> np.ndarray:
    digits = np.array(rows, dtype="S20")
    if (np.abs(digits.astype(np.float64)) > LIMIT).any():
        raise IngestError(path, "a time or byte count beyond 64 bits")
    return digits.astype(np.int64).reshape(-1, 4)


def states(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time ns, bytes per category) after each distinct time, in file order."""
    t = entries[:, 0]
    positive = t[t > 0]
    earliest = positive.min() if len(positive) else 0
    t = np.where(t < 0, earliest, t)
    delta = np.zeros((len(entries), len(CATEGORIES)), dtype=np.int64)
    delta[np.arange(len(entries)), entries[:, 3]] = entries[:, 2]
    live = np.cumsum(delta, axis=0)
    last = np.ones(len(t), dtype=bool)
    last[:-1] = t[1:] != t[:-1]
    return t[last], live[last]


def parse(path: Path) -> Parsed:
    entries = _entries(path)
    if not len(entries):
        raise IngestError(path, "the memory timeline has no entries")
    times, live = states(entries)
    trace = RankTrace(name_of(path))
    rank_in_file_name(trace)
    columns = {"rank": from_numpy(np.full(len(times), trace.rank, dtype=np.int32)),
               "ts_us": from_numpy(times / 1000)}
    for i, category in enumerate(CATEGORIES):
        columns[f"{category}_bytes"] = from_numpy(live[:, i])
    columns["total_bytes"] = from_numpy(live.sum(axis=1))
    warnings = [] if trace.rank_from != "default" else [
        f"{trace.source}: no rank in the file name (rank3, worker_3, ...); using rank 0"]
    return Parsed(tables={"gpu_memory": pa.table(columns)}, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    return bool(_HEAD.match(head))


def sample() -> Sample:
    """Two pre-existing parameters, an activation made and freed, a gradient versioned from temporary."""
    t = 1_700_000_000_000_000_000
    entries = [[-1, 1, 4096, 0], [-1, 1, 1024, 1], [t, 2, 2048, 4], [t + 1000, 2, 512, 3],
               [t + 2000, 3, -512, 3], [t + 2000, 3, 512, 5], [t + 3000, 4, -2048, 4]]
    return Sample.file("memory_rank0.raw.json", json.dumps(entries).encode())


FORMAT = Format(
    name="memory-timeline",
    priority=60,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="PyTorch profiler memory timeline, raw form (export_memory_timeline to .raw.json[.gz]), "
                "one file per rank: bytes live per category over time",
)

"""Nsight Systems exports (`nsys export --type sqlite`): kernels, memcpys, memsets and
synchronisations per GPU into the tables a Kineto trace fills, and NVTX ranges as stage spans
(gpu_ranges) with the GPU work each one launched.

The tables and columns read are the export schema's (nsys 2021.5 onwards; checked against
`../shared/data/nsys/report*.sqlite`, written by nsys 2026.1): CUPTI_ACTIVITY_KIND_KERNEL,
_MEMCPY, _MEMSET and _SYNCHRONIZATION (start and end in ns since the capture began, deviceId,
streamId, correlationId, globalPid), CUPTI_ACTIVITY_KIND_RUNTIME (the launching call, by
correlationId), NVTX_EVENTS (push/pop and start/end ranges, text or textId), StringIds (every
name), TARGET_INFO_SESSION_START_TIME (utcEpochNs) and META_DATA_CAPTURE (the launched
process's environment). Read with the standard library's sqlite3, read-only, a batch of rows
at a time: the file stays on disk and only its compact columns are held.
"""
from __future__ import annotations

import re
import sqlite3
import tempfile
from array import array
from collections import defaultdict
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.gpu_trace import (INT32_MAX, KERNEL, MEMORY_EVENT, SYNC, RankTrace, after_load, count,
                                        known_name, rank_in_file_name, tables, warnings)
from polytrace.ingest.rl_stages import stage_of
from polytrace.ingest.sources import name_of, seekable

MAGIC = b"SQLite format 3\x00"
BATCH_ROWS = 65536
# A name longer than this is no kernel or range name nsys wrote; sqlite refuses to return it.
MAX_VALUE_BYTES = 1 << 20
# CUPTI's memcpy and memory kinds (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND), named as Kineto
# names them (libkineto CuptiActivity memcpyKindString, memoryKindString) so that the two
# profilers' copies carry the same names and fall in the same categories.
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                6: "Managed Static", 7: "Unknown"}
# CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_* (ENUM_CUPTI_SYNC_TYPE), as Kineto names the waits
SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
# NVTX_EVENTS.eventType of a range (ENUM_NSYS_EVENT_TYPE), when the file has no enum table
RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
_STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)$")
_ENV_RANK = re.compile(r'^(RANK|WORLD_SIZE)="?(\d+)"?$')
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
RANGE_TYPES_PA = {"rank": pa.int32(), "name": pa.string(), "stage": pa.string(), "ts_us": pa.float64(),
                  "dur_us": pa.float64(), "gpu_events": pa.int64(), "gpu_us": pa.float64(),
                  "communication_us": pa.float64(), "memory_us": pa.float64(), "gpu_start_us": pa.float64(),
                  "gpu_end_us": pa.float64()}


class Export:
    """An open export: its tables, their columns, and reads of them in batches."""

    def __init__(self, con: sqlite3.Connection, path: Path):
        self.con, self.path = con, path
        rows = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        self.tables = {name for (name,) in rows}

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.rows(f'PRAGMA table_info("{table}")')}

    def rows(self, sql: str, params: tuple = ()) -> Iterator[tuple]:
        try:
            cursor = self.con.execute(sql, params)
            while batch := cursor.fetchmany(BATCH_ROWS):
                yield from batch
        except sqlite3.Error as e:
            raise IngestError(self.path, f"unreadable SQLite data ({e})") from None

    def one(self, sql: str, default=None):
        return next(iter(self.rows(sql)), default)


@contextmanager
def _opened(path: Path) -> Iterator[Export]:
    """The file opened read-only and immutable (no journal, no lock, nothing written)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as e:
        raise IngestError(path, f"not a readable SQLite file ({e})") from None
    with closing(con):
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        # a file's own views and triggers are not run: only its tables are read, by name
        con.execute("PRAGMA trusted_schema = OFF")
        con.execute("PRAGMA cell_size_check = ON")
        yield Export(con, path)


def _name_column(export: Export, table: str, wanted: tuple[str, ...]) -> str | None:
    have = export.columns(table)
    return next((c for c in wanted if c in have), None)


def _required(export: Export, table: str, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in export.columns(table)]
    if missing:
        raise IngestError(export.path, f"{table} has no column {', '.join(missing)}: not an nsys export "
                                       "this version reads")


def _session_start_ns(export: Export) -> int | None:
    if "TARGET_INFO_SESSION_START_TIME" not in export.tables:
        return None
    row = export.one("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    return row[0] if row and isinstance(row[0], int) and 0 <= row[0] < 2**62 else None


def _environment(export: Export) -> dict[str, int]:
    """RANK and WORLD_SIZE of the launched process's environment, where the capture kept it."""
    if "META_DATA_CAPTURE" not in export.tables:
        return {}
    found = {}
    for (value,) in export.rows("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"):
        m = _ENV_RANK.match(value) if isinstance(value, str) else None
        if m and m.group(1) not in found:
            found[m.group(1)] = count(m.group(2), m.group(1), str(export.path.name))
    return found


class Reader:
    """The export's device events, per device (one RankTrace each), with their launches."""

    def __init__(self, export: Export, source: str):
        self.export, self.source = export, source
        self.base_ns = _session_start_ns(export)
        self.traces: dict[int, RankTrace] = {}
        self.pids: dict[int, set[int]] = defaultdict(set)  # device -> processes that ran work on it
        self.launches: dict[int, tuple[array, array]] = {}  # process -> (correlation ids, launch ns)
        self.event_pid: dict[int, array] = defaultdict(lambda: array("q"))  # device -> each event's process

    def us(self, ns: int) -> float:
        """A time of the capture on the UTC clock (us since the epoch), or the capture's own clock."""
        return (ns + (self.base_ns or 0)) / 1000

    def trace(self, device: int) -> RankTrace:
        if device not in self.traces:
            self.traces[device] = RankTrace(self.source)
        return self.traces[device]

    def add(self, device, start, end, stream, kind: int, name: str, corr, pid) -> None:
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(device, int)) or end < start:
            self.trace(device if isinstance(device, int) else -1).skipped += 1
            return
        trace = self.trace(device)
        trace.events += 1
        stream = stream if isinstance(stream, int) else -1
        known = known_name(trace, name, kind)
        trace.ts.append(self.us(start))
        trace.dur.append((end - start) / 1000)
        trace.stream.append(stream if kind != SYNC and 0 <= stream <= INT32_MAX else -1)
        trace.kind.append(known[1])
        trace.name.append(known[0])
        trace.corr.append(corr if isinstance(corr, int) else -1)
        trace.stored.append(kind != SYNC and 0 <= stream <= INT32_MAX)
        pid = pid >> 24 if isinstance(pid, int) else -1
        self.pids[device].add(pid)
        self.event_pid[device].append(pid)

    def read(self) -> None:
        self._kernels()
        self._memcpys()
        self._memsets()
        self._syncs()
        self._launches()

    def _kernels(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "end", "deviceId", "streamId", "correlationId"))
        name = _name_column(self.export, table, ("demangledName", "shortName"))
        name_sql = f"s.value FROM {table} k LEFT JOIN StringIds s ON s.id = k.{name}" if name else f"NULL FROM {table} k"
        for start, end, device, stream, corr, pid, text in self.export.rows(
                f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, {self._pid('k', table)}, {name_sql}"):
            self.add(device, start, end, stream, KERNEL, text if isinstance(text, str) else "unnamed kernel", corr, pid)

    def _memcpys(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "end", "deviceId", "streamId", "correlationId", "copyKind"))
        kinds = "srcKind, dstKind" if {"srcKind", "dstKind"} <= self.export.columns(table) else "NULL, NULL"
        for start, end, device, stream, corr, pid, copy, src, dst in self.export.rows(
                f"SELECT start, end, deviceId, streamId, correlationId, {self._pid('', table)}, copyKind, {kinds} "
                f"FROM {table}"):
            name = f"Memcpy {COPY_KINDS.get(copy, 'Unknown')}"
            if src is not None or dst is not None:
                name += f" ({MEMORY_KINDS.get(src, 'Unknown')} -> {MEMORY_KINDS.get(dst, 'Unknown')})"
            self.add(device, start, end, stream, MEMORY_EVENT, name, corr, pid)

    def _memsets(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_MEMSET"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "end", "deviceId", "streamId", "correlationId"))
        kind = "memKind" if "memKind" in self.export.columns(table) else "NULL"
        for start, end, device, stream, corr, pid, memory in self.export.rows(
                f"SELECT start, end, deviceId, streamId, correlationId, {self._pid('', table)}, {kind} FROM {table}"):
            name = "Memset" if memory is None else f"Memset ({MEMORY_KINDS.get(memory, 'Unknown')})"
            self.add(device, start, end, stream, MEMORY_EVENT, name, corr, pid)

    def _syncs(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "end", "deviceId", "streamId", "correlationId", "syncType"))
        for start, end, device, stream, corr, pid, sync in self.export.rows(
                f"SELECT start, end, deviceId, streamId, correlationId, {self._pid('', table)}, syncType FROM {table}"):
            self.add(device, start, end, stream, SYNC, SYNC_NAMES.get(sync, "Unknown Sync"), corr, pid)

    def _pid(self, alias: str, table: str) -> str:
        return f"{alias + '.' if alias else ''}globalPid" if "globalPid" in self.export.columns(table) else "NULL"

    def _launches(self) -> None:
        """Each process's CUDA runtime calls by correlation id: the CPU launch of its GPU events."""
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "correlationId", "globalTid"))
        for start, corr, tid in self.export.rows(f"SELECT start, correlationId, globalTid FROM {table}"):
            if isinstance(start, int) and isinstance(corr, int) and isinstance(tid, int) and corr >= 0:
                corrs, times = self.launches.setdefault(tid >> 24, (array("q"), array("q")))
                corrs.append(corr)
                times.append(start)
        for device, trace in self.traces.items():
            for pid in self.pids[device]:
                corrs, times = self.launches.get(pid, ((), ()))
                trace.launch_corr.extend(corrs)
                trace.launch_ts.extend(self.us(t) for t in times)


def _range_types(export: Export) -> list[int]:
    if "ENUM_NSYS_EVENT_TYPE" in export.tables:
        found = [i for i, name in export.rows("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE") if name in RANGE_TYPES]
        if found:
            return found
    return list(RANGE_TYPES.values())


def _ranges(export: Export) -> Iterator[tuple[int, int, int, str]]:
    """(start ns, end ns, process, text) of every closed NVTX range."""
    if "NVTX_EVENTS" not in export.tables:
        return
    _required(export, "NVTX_EVENTS", ("start", "end", "eventType", "globalTid"))
    have = export.columns("NVTX_EVENTS")
    text = "n.text" if "text" in have else "NULL"
    if "textId" in have and "StringIds" in export.tables:
        text = f"coalesce({text}, s.value)"
        joined = "NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
    else:
        joined = "NVTX_EVENTS n"
    types = _range_types(export)
    marks = ", ".join("?" * len(types))
    for start, end, tid, name in export.rows(
            f"SELECT n.start, n.end, n.globalTid, {text} FROM {joined} WHERE n.eventType IN ({marks})", tuple(types)):
        if isinstance(start, int) and isinstance(end, int) and end >= start and isinstance(name, str):
            yield start, end, tid >> 24 if isinstance(tid, int) else -1, name


def _assign_ranks(reader: Reader, env: dict[str, int]) -> None:
    """One GPU: the rank from the file name, else the launched process's RANK, else 0. Several
    GPUs in one export (a process tree profiled whole): each GPU's CUDA device id."""
    traces = reader.traces
    for device, trace in traces.items():
        if len(traces) > 1:
            trace.rank, trace.rank_from = device, "device id"
            continue
        rank_in_file_name(trace)
        if trace.rank_from == "default" and "RANK" in env:
            trace.rank, trace.rank_from = env["RANK"], "environment"
        trace.world_size = env.get("WORLD_SIZE")


def _device_names(export: Export) -> dict[int, str]:
    if "TARGET_INFO_GPU" not in export.tables or "name" not in export.columns("TARGET_INFO_GPU"):
        return {}
    key = "cuDevice" if "cuDevice" in export.columns("TARGET_INFO_GPU") else "id"
    return {d: n for d, n in export.rows(f"SELECT {key}, name FROM TARGET_INFO_GPU") if isinstance(n, str)}


def _projection(reader: Reader, device: int, trace: RankTrace):
    """Per process of the device, its GPU events sorted by CPU launch (ns since the capture
    began): (launch, dur us, category) arrays, for the ranges it launched them in."""
    pid = np.frombuffer(reader.event_pid[device], dtype=np.int64)
    corr = np.frombuffer(trace.corr, dtype=np.int64)
    stored = np.frombuffer(trace.stored, dtype=np.int8).astype(bool)
    ts = np.frombuffer(trace.ts, dtype=np.float64)
    dur = np.frombuffer(trace.dur, dtype=np.float64)
    category = np.frombuffer(trace.kind, dtype=np.int8)
    out = {}
    for p in reader.pids[device]:
        corrs, times = reader.launches.get(p, ((), ()))
        lc, lt = np.array(corrs, dtype=np.int64), np.array(times, dtype=np.int64)
        order = np.argsort(lc, kind="stable")
        lc, lt = lc[order], lt[order]
        mine = stored & (pid == p)
        c = corr[mine]
        pos = np.minimum(np.searchsorted(lc, c), max(len(lc) - 1, 0))
        hit = (lc[pos] == c) if len(lc) else np.zeros(len(c), dtype=bool)
        launch = lt[pos][hit]
        by = np.argsort(launch, kind="stable")
        out[p] = (launch[by], ts[mine][hit][by], dur[mine][hit][by], category[mine][hit][by])
    return out


def _range_rows(reader: Reader, ranges: list[tuple[int, int, int, str]], by_pid: dict[int, int]) -> dict:
    """gpu_ranges columns: each range with the GPU events its process launched inside it."""
    cols: dict[str, list] = {k: [] for k in RANGE_TYPES_PA}
    projections = {d: _projection(reader, d, t) for d, t in reader.traces.items()}
    for start, end, pid, name in ranges:
        device = by_pid.get(pid, next(iter(reader.traces)) if len(reader.traces) == 1 else None)
        if device is None:
            continue
        trace = reader.traces[device]
        if m := _STEP_NAME.match(name):
            trace.steps.append((count(m.group(1), "ProfilerStep", trace.source), reader.us(start), (end - start) / 1000))
            continue
        launch, ts, dur, category = projections[device].get(pid, (np.zeros(0, np.int64),) * 4)
        lo, hi = np.searchsorted(launch, [start, end])
        part_ts, part_dur, part_cat = ts[lo:hi], dur[lo:hi], category[lo:hi]
        for key, value in (("rank", trace.rank), ("name", name), ("stage", stage_of(name)),
                           ("ts_us", reader.us(start)), ("dur_us", (end - start) / 1000),
                           ("gpu_events", int(hi - lo)), ("gpu_us", float(part_dur.sum())),
                           ("communication_us", float(part_dur[part_cat == 1].sum())),
                           ("memory_us", float(part_dur[part_cat == 2].sum())),
                           ("gpu_start_us", float(part_ts.min()) if hi > lo else None),
                           ("gpu_end_us", float((part_ts + part_dur).max()) if hi > lo else None)):
            cols[key].append(value)
    return cols


def _parse_export(export: Export, path: Path) -> Parsed:
    if "StringIds" not in export.tables or not export.tables & {*ACTIVITY, "NVTX_EVENTS"}:
        raise IngestError(path, "an SQLite file without Nsight Systems tables (StringIds, CUPTI_ACTIVITY_KIND_*, "
                                "NVTX_EVENTS): not an `nsys export --type sqlite` file")
    reader = Reader(export, name_of(path))
    reader.read()
    reader.traces.pop(-1, None)
    if not reader.traces:
        raise IngestError(path, "no GPU kernels, memcpys, memsets or synchronisations: was the capture run with "
                                "`--trace=cuda`?")
    _assign_ranks(reader, _environment(export))
    devices = _device_names(export)
    by_pid = {p: d for d, pids in reader.pids.items() for p in pids}
    ranges = _range_rows(reader, list(_ranges(export)), by_pid)
    for device, trace in reader.traces.items():
        trace.device = devices.get(device)
    traces = list(reader.traces.values())
    out = tables(traces)
    out["gpu_ranges"] = pa.table({k: from_list(v, t) for k, (v, t) in
                                  ((k, (ranges[k], t)) for k, t in RANGE_TYPES_PA.items())})
    notes = [w for t in traces for w in warnings(t) if "distributedInfo" not in w]
    if reader.base_ns is None:
        notes.append(f"{reader.source}: no TARGET_INFO_SESSION_START_TIME; times are on the capture's own clock, "
                     "not aligned with other ranks' files")
    if any(t.rank_from == "default" for t in traces):
        notes.append(f"{reader.source}: no rank in the file name and no RANK in the captured environment; using rank 0")
    return Parsed(tables=out, run={"n_gpus": traces[0].world_size if len(traces) == 1 else len(traces)},
                  warnings=notes)


def parse(path: Path) -> Parsed:
    with seekable(path) as file, _opened(file) as export:
        return _parse_export(export, path)


def sniff(head: bytes, name: str) -> bool:
    return head.startswith(MAGIC)


def sample() -> Sample:
    """One GPU: a GEMM and an all-reduce launched inside an NVTX range update_actor, a copy before it."""
    with tempfile.TemporaryDirectory(prefix="polytrace-nsys-sample-") as tmp:
        path = Path(tmp) / "report_rank0.sqlite"
        with closing(sqlite3.connect(path)) as con:
            con.executescript(_SAMPLE_SQL)
            con.commit()
        return Sample.file("report_rank0.sqlite", path.read_bytes())


_SAMPLE_SQL = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'ncclAllReduceKernel'), (3, 'cudaLaunchKernel'), (4, 'update_actor');
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER);
INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '2023-11-14T22:13:20', NULL, 0);
CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, cuDevice INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100', 0);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER, callchainId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (110000, 115000, 0, 16777217, 7, 3, 0, NULL),
    (190000, 195000, 0, 16777217, 8, 3, 0, NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (120000, 170000, 0, 1, 7, 7, 16777216, 1, 1),
    (200000, 230000, 0, 1, 13, 8, 16777216, 2, 2);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
    copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (50000, 60000, 0, 1, 7, 5, 16777216, 4096, 1, 0, 2);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER);
INSERT INTO NVTX_EVENTS VALUES (100000, 250000, 60, 1, NULL, NULL, NULL, 16777217, NULL, 4, 0);
"""


FORMAT = Format(
    name="nsys",
    priority=60,
    sniff=sniff,
    parse=parse,
    sample=sample,
    after_load=after_load,
    description="Nsight Systems export (`nsys export --type sqlite`), one file per rank or one for a process "
                "tree (.sqlite, gzip or in an archive): kernels, memcpys, memsets, syncs per GPU, NVTX ranges",
)

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
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import numpy as np

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.gpu_trace import (INT32_MAX, KERNEL, MEMORY_EVENT, SYNC, RankTrace,
                                        after_load, count, extend, known_name, rank_in_file_name, tables, warnings)
from polytrace.ingest.sources import name_of, seekable

MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100
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
class Export:
    """An open export: its tables, their columns, and reads of them in batches."""

    def __init__(self, con: sqlite3.Connection, path: Path):
        self.con, self.path = con, path
        rows = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        self.tables = {name for (name,) in rows}

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.rows(f'PRAGMA table_info("{table}")')}

    def batches(self, sql: str, params: tuple = ()) -> Iterator[list[tuple]]:
        try:
            cursor = self.con.execute(sql, params)
            while batch := cursor.fetchmany(BATCH_ROWS):
                yield batch
        except sqlite3.Error as e:
            raise IngestError(self.path, f"unreadable SQLite data ({e})") from None

    def rows(self, sql: str, params: tuple = ()) -> Iterator[tuple]:
        for batch in self.batches(sql, params):
            yield from batch

    def one(self, sql: str, params: tuple = (), default=None):
        return next(iter(self.rows(sql, params)), default)


def _check_length(path: Path, source: Path) -> None:
    """Refuse a file whose length is not the page count times the page size its header states
    (bytes 16-17 and 28-31 of the SQLite file format), where that count is valid (the change
    counter at 24-27 equals the version at 92-95): SQLite would read a truncated file's tables
    until it met a missing page, and silently ignore bytes appended to the file."""
    with open(path, "rb") as f:
        header = f.read(HEADER_BYTES)
        size = f.seek(0, 2)
    if len(header) < HEADER_BYTES or not header.startswith(MAGIC):
        raise IngestError(source, "not an SQLite file (no SQLite header)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[24:28] == header[92:96] and size != pages * page_size:
        raise IngestError(source, f"{size:,} bytes where its SQLite header states {pages * page_size:,} "
                                  f"({pages:,} pages of {page_size:,} bytes): truncated, or bytes appended")


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


def _int(column: str, default: int = -1) -> str:
    """The column where it holds an integer, else `default`: a batch converts to int64 whole."""
    return f"iif(typeof({column}) = 'integer', {column}, {default})"


# Per activity table: its kind, the columns its name is made of (as one integer key), and
# the columns it must have.
ACTIVITIES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, None, ()),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (MEMORY_EVENT, "copyKind", ("copyKind",)),
    "CUPTI_ACTIVITY_KIND_MEMSET": (MEMORY_EVENT, "memKind", ()),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (SYNC, "syncType", ("syncType",)),
}
EVENT_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId")


class Reader:
    """The export's device events, per device (one RankTrace each), with their launches, read a
    batch of rows at a time into numpy columns."""

    def __init__(self, export: Export, source: str):
        self.export, self.source = export, source
        self.base_ns = _session_start_ns(export)
        self.traces: dict[int, RankTrace] = {}
        # a process (globalPid >> 24, as nsys serialises it) -> a small index: correlation ids are
        # a process's own, so an event's and its launch's key is (index << 32) + correlation id
        self.process_index: dict[int, int] = {}
        self.launch = (array("q"), array("q"))  # (key, start ns) of each runtime call
        self.strings: dict[int, str] = {}
        self.skipped = 0
        self.skipped_ranges = 0

    def us(self, ns: np.ndarray) -> np.ndarray:
        """Times of the capture on the UTC clock (us since the epoch), or on the capture's own
        clock; whole us first, so the fraction keeps what a float of that size can."""
        total = ns + (self.base_ns or 0)
        return (total // 1000).astype(np.float64) + (total % 1000) / 1000

    def trace(self, device: int) -> RankTrace:
        if device not in self.traces:
            self.traces[device] = RankTrace(self.source)
            if self.base_ns is not None:  # us() puts every time on the epoch
                self.traces[device].clock, self.traces[device].clock_origin_ns = "nsys session start", 0
        return self.traces[device]

    def pids(self, device: int) -> np.ndarray:
        """The indices of the processes that ran work on the device."""
        return np.unique(np.frombuffer(self.traces[device].process, dtype=np.int64))

    def processes(self, pids: np.ndarray) -> np.ndarray:
        uniq, inverse = np.unique(pids, return_inverse=True)
        index = [self.process_index.setdefault(p, len(self.process_index)) for p in uniq.tolist()]
        return np.array(index, dtype=np.int64)[inverse]

    @staticmethod
    def key(process: np.ndarray, corr: np.ndarray) -> np.ndarray:
        return np.where(corr >= 0, (process << 32) + (corr & 0xFFFFFFFF), -1)

    def read(self) -> None:
        for table, (kind, key, needed) in ACTIVITIES.items():
            if table in self.export.tables:
                self._activity(table, kind, key, needed)
        self._launches()

    def _activity(self, table: str, kind: int, key: str | None, needed: tuple[str, ...]) -> None:
        _required(self.export, table, EVENT_COLUMNS + needed)
        have = self.export.columns(table)
        if kind == KERNEL:
            key = next((c for c in ("demangledName", "shortName") if c in have), None)
        if key == "copyKind" and {"srcKind", "dstKind"} <= have:
            key_sql = f"{_int('copyKind')} * 65536 + {_int('srcKind', 255)} * 256 + {_int('dstKind', 255)}"
        else:
            key_sql = _int(key) if key in have else "-1"
        pid = f"{_int('globalPid', 0)} >> 24" if "globalPid" in have else "0"
        valid = "typeof(start) = 'integer' AND typeof(end) = 'integer' AND typeof(deviceId) = 'integer' AND end >= start"
        self.skipped += self.export.one(f"SELECT count(*) FROM {table} WHERE NOT ({valid})")[0]
        sql = (f"SELECT start, end, deviceId, {_int('streamId')}, {_int('correlationId')}, {pid}, {key_sql} "
               f"FROM {table} WHERE {valid}")
        for batch in self.export.batches(sql):
            self._add(np.array(batch, dtype=np.int64).reshape(-1, 7), kind, table)

    def _add(self, rows: np.ndarray, kind: int, table: str) -> None:
        for device in np.unique(rows[:, 2]).tolist():
            part = rows[rows[:, 2] == device]
            trace = self.trace(device)
            keys, inverse = np.unique(part[:, 6], return_inverse=True)
            known = [known_name(trace, self._name(table, k), kind) for k in keys.tolist()]
            index = np.array([k[0] for k in known], dtype=np.int64)[inverse]
            category = np.array([k[1] for k in known], dtype=np.int8)[inverse]
            stream = part[:, 3]
            stored = (stream >= 0) & (stream <= INT32_MAX) if kind != SYNC else np.zeros(len(part), dtype=bool)
            process = self.processes(part[:, 5])
            extend(trace, self.us(part[:, 0]), (part[:, 1] - part[:, 0]) / 1000, np.where(stored, stream, -1),
                   category, index, self.key(process, part[:, 4]), stored)
            trace.process.frombytes(process.tobytes())

    def _name(self, table: str, key: int) -> str:
        if table == "CUPTI_ACTIVITY_KIND_KERNEL":
            if key not in self.strings:
                row = self.export.one("SELECT value FROM StringIds WHERE id = ?", (key,))
                self.strings[key] = row[0] if row and isinstance(row[0], str) else "unnamed kernel"
            return self.strings[key]
        if table == "CUPTI_ACTIVITY_KIND_MEMCPY":
            name = f"Memcpy {COPY_KINDS.get(key // 65536 if key >= 0 else key, 'Unknown')}"
            src, dst = (key // 256) % 256, key % 256
            return name if key < 0 or (src, dst) == (255, 255) else \
                f"{name} ({MEMORY_KINDS.get(src, 'Unknown')} -> {MEMORY_KINDS.get(dst, 'Unknown')})"
        if table == "CUPTI_ACTIVITY_KIND_MEMSET":
            return "Memset" if key < 0 else f"Memset ({MEMORY_KINDS.get(key, 'Unknown')})"
        return SYNC_NAMES.get(key, "Unknown Sync")

    def _launches(self) -> None:
        """Each process's CUDA runtime calls by correlation id: the CPU launch of its GPU events."""
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if table not in self.export.tables:
            return
        _required(self.export, table, ("start", "correlationId", "globalTid"))
        sql = (f"SELECT globalTid >> 24, correlationId, start FROM {table} WHERE typeof(start) = 'integer' "
               "AND typeof(correlationId) = 'integer' AND typeof(globalTid) = 'integer' AND correlationId >= 0")
        known = np.array(sorted(self.process_index), dtype=np.int64)
        for batch in self.export.batches(sql):
            rows = np.array(batch, dtype=np.int64).reshape(-1, 3)
            rows = rows[np.isin(rows[:, 0], known)]  # a process that ran nothing on a GPU launched nothing
            self.launch[0].frombytes(self.key(self.processes(rows[:, 0]), rows[:, 1]).tobytes())
            self.launch[1].frombytes(np.ascontiguousarray(rows[:, 2]).tobytes())
        key, start = (np.frombuffer(c, dtype=np.int64) for c in self.launch)
        for device, trace in self.traces.items():
            mine = np.isin(key >> 32, self.pids(device))
            trace.launch_corr.frombytes(key[mine].tobytes())
            trace.launch_ts.frombytes(self.us(start[mine]).tobytes())


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


def _attach_ranges(reader: Reader, ranges: Iterator[tuple[int, int, int, str]]) -> None:
    """Each range to the GPU(s) its process ran work on (ProfilerStep#N as a step window); with
    one GPU, a range of a process that ran nothing on it too, with no GPU work."""
    devices = {p: [d for d in reader.traces if p in reader.pids(d).tolist()] for p in reader.process_index.values()}
    only = list(reader.traces) if len(reader.traces) == 1 else []
    for start, end, pid, name in ranges:
        process = reader.process_index.get(pid, -1)
        targets = devices.get(process) or only
        if not targets:
            reader.skipped_ranges += 1
        at = float(reader.us(np.array([start], dtype=np.int64))[0])
        for device in targets:
            trace = reader.traces[device]
            if m := _STEP_NAME.match(name):
                trace.steps.append((count(m.group(1), "ProfilerStep", trace.source), at, (end - start) / 1000))
            else:
                trace.ranges.append((process, at, (end - start) / 1000, name))


def _parse_export(export: Export, path: Path) -> Parsed:
    if "StringIds" not in export.tables or not export.tables & {*ACTIVITIES, "NVTX_EVENTS"}:
        raise IngestError(path, "an SQLite file without Nsight Systems tables (StringIds, CUPTI_ACTIVITY_KIND_*, "
                                "NVTX_EVENTS): not an `nsys export --type sqlite` file")
    reader = Reader(export, name_of(path))
    reader.read()
    if not reader.traces:
        raise IngestError(path, "no GPU kernels, memcpys, memsets or synchronisations: was the capture run with "
                                "`--trace=cuda`?")
    _assign_ranks(reader, _environment(export))
    devices = _device_names(export)
    _attach_ranges(reader, _ranges(export))
    for device, trace in reader.traces.items():
        trace.device = devices.get(device)
    traces = list(reader.traces.values())
    out = tables(traces)
    notes = [w for t in traces for w in warnings(t) if "distributedInfo" not in w]
    if reader.base_ns is None:
        notes.append(f"{reader.source}: no TARGET_INFO_SESSION_START_TIME; times are on the capture's own clock, "
                     "not aligned with other ranks' files")
    if reader.skipped or reader.skipped_ranges:
        notes.append(f"{reader.source}: skipped {reader.skipped} GPU event(s) without a whole start, end and device, "
                     f"and {reader.skipped_ranges} NVTX range(s) of processes that ran nothing on a GPU")
    if any(t.rank_from == "default" for t in traces):
        notes.append(f"{reader.source}: no rank in the file name and no RANK in the captured environment; using rank 0")
    return Parsed(tables=out, run={"n_gpus": traces[0].world_size if len(traces) == 1 else len(traces)},
                  warnings=notes)


def parse(path: Path) -> Parsed:
    with seekable(path) as file:
        _check_length(file, path)
        with _opened(file) as export:
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

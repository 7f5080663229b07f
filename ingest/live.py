"""Following a run while it trains: which bytes of a growing directory are whole steps, and the
follower that hands them to a sink (a database, or a server's POST /api/runs/{id}/append).

How each followed format grows, and when its bytes make whole steps (the completeness rules):
- a log (verl console output / output.log, verl JSONL metrics, the DAPO filter file) grows a line
  per step: every whole line is committed; a last line without its newline waits for it. A
  filter line waits, too, until its step's packed lengths are in the run (its flags address them).
- a step file (packed_lengths_step_N.jsonl, reward_timings_step_N.jsonl,
  multiturn_workload_step_N.jsonl, verl's rollout dump N.jsonl) is one step: it is committed
  whole, once it is complete: a later step's file of the same kind has appeared, or its size and
  mtime have not changed for the settle time (or the follower was told that the job is over). A
  step file that changes after it was committed is reloaded: its steps' rows are replaced.
- a trace (a Kineto trace) is committed whole once it has settled, and never reloaded.
- a gzip file is read whole, like a trace: byte offsets into it mean nothing.

Each file's committed byte offset is stored with the rows it gave, in one transaction
(ingest.load.append_chunk), so a restarted follower resumes where the run is: no duplicate and no
missing step. A file whose identity (device:inode) changes, or that shrinks below its committed
offset, was rotated or truncated: that is said once, and the new file is followed from its first
byte (the rows committed so far stay; a step it logs again replaces the old values key by key,
as a resumed verl run re-logs steps). A file that stops parsing is said once and left where it
stopped; the other files keep updating, and it is tried again when it changes.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.options import SETTLE_S
from polytrace.ingest.sources import GZIP_MAGIC, HEAD_BYTES, MAX_LINE_BYTES

LINES = ("verl-console", "verl-jsonl", "polytrace-filter")
STEP_FILES = ("polytrace-packed", "polytrace-reward-timings", "polytrace-multiturn", "verl-rollout-dump")
TRACES = ("kineto",)
FOLLOWED = LINES + STEP_FILES + TRACES
# A log's new bytes read per append: a follower far behind catches up a chunk at a time.
CHUNK_BYTES = 8 << 20
_STEP_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class Gap(IngestError):
    """An append that starts past the file's committed offset: resend from `offset`."""

    def __init__(self, name: str, offset: int):
        super().__init__(name, f"bytes from {offset} are missing (resend from byte {offset})")
        self.offset = offset


class Diverged(Gap):
    """An append whose bytes before the committed offset differ from the bytes committed there (a
    second writer of the same file, or a file rewritten in place): refused, naming the offset."""

    def __init__(self, name: str, offset: int, at: int):
        IngestError.__init__(self, name, f"the bytes from {at} differ from the ones the run holds up to byte "
                                         f"{offset}: another writer sent this file's bytes (resend from byte {offset})")
        self.offset = offset


# How many of a log's last committed bytes are kept to check a resend against
TAIL_BYTES = 64


def live_run_id(directory: str | Path) -> str:
    """The run a followed directory appends to: stable across restarts, from its absolute path."""
    return hashlib.sha256(f"live:{Path(directory).resolve()}".encode()).hexdigest()[:12]


def mode(format_name: str, gzipped: bool = False) -> str:
    """'lines', 'step' (a step file) or 'trace' for a followed format; '' for one not followed."""
    if format_name not in FOLLOWED:
        return ""
    if format_name in LINES and not gzipped:
        return "lines"
    return "step" if format_name in STEP_FILES else "trace"


@dataclass
class Chunk:
    """What a follower hands a sink: bytes of one file from `offset`, or (on this machine) the
    whole file at `path` to parse where it is."""

    file_name: str                 # its path below the followed directory
    offset: int = 0
    data: bytes | None = None      # a log's bytes from offset; a whole step file or trace
    path: Path | None = None       # or the file itself (whole), parsed in place
    format: str | None = None      # as the follower detected it; else the sink sniffs the bytes
    complete: bool = False         # a whole step file or trace that stopped growing
    identity: str | None = None    # device:inode on the follower's machine
    mtime: float | None = None
    reset: bool = False            # a new file under a known name: start again at byte 0

    @property
    def size(self) -> int:
        if self.data is not None:
            return self.offset + len(self.data)
        return self.path.stat().st_size if self.path else self.offset


@dataclass
class FileState:
    """A followed file as its run holds it (the live_files row)."""

    committed: int = 0
    format: str | None = None
    identity: str | None = None
    mtime: float | None = None
    steps: list[int] = field(default_factory=list)
    note: str | None = None
    tail: bytes = b""  # a log's last committed bytes (TAIL_BYTES): what a resend must repeat

    def as_dict(self) -> dict:
        return {"committed": self.committed, "format": self.format, "identity": self.identity,
                "mtime": self.mtime, "steps": self.steps, "note": self.note}


@dataclass
class Appended:
    """What one append did: the file's committed offset after it, the steps it brought or
    changed, what it had to say (a rotated file, a step file reloaded) and the warnings of the
    bytes it parsed (lines cut short, a step logged twice), as a batch ingest gives them."""

    committed: int
    steps: list[int] = field(default_factory=list)
    rows: int = 0
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def file_states(con, run_id: str) -> dict[str, FileState]:
    """Every followed file of a live run, by name."""
    rows = con.execute("SELECT file_name, committed, format, identity, mtime, steps, note, tail FROM live_files "
                       "WHERE live_run = ? ORDER BY file_name", [run_id]).fetchall()
    return {r[0]: FileState(r[1] or 0, r[2], r[3], r[4], list(r[5] or []), r[6], bytes(r[7] or b"")) for r in rows}


def record_note(con, run_id: str, file_name: str, note: str) -> None:
    """Keep what was said about a file (it stopped parsing) for the dashboard to show."""
    con.execute("UPDATE live_files SET note = ? WHERE live_run = ? AND file_name = ?", [note, run_id, file_name])
    if not con.execute("SELECT 1 FROM live_files WHERE live_run = ? AND file_name = ?",
                       [run_id, file_name]).fetchall():
        con.execute("INSERT INTO live_files (live_run, file_name, committed, note) "
                    "SELECT ?, ?, 0, ? WHERE EXISTS (SELECT 1 FROM live_runs WHERE live_run = ?)",
                    [run_id, file_name, note, run_id])


def sniff_bytes(head: bytes, name: str) -> str | None:
    """The format that claims a file from its first bytes (already decompressed), as
    registry.detect does for a path."""
    claims = [f for f in registry.FORMATS if f.sniff(head, name)]
    return max(claims, key=lambda f: f.priority).name if claims else None


def whole_lines(data: bytes) -> bytes:
    """The bytes up to and with the last newline: a last line without one waits for it."""
    return data[:data.rfind(b"\n") + 1]


# --- the follower ----------------------------------------------------------------------------------

class Sink(Protocol):
    """Where a follower commits: a database (ingest.load.append_chunk) or a server."""

    def states(self) -> dict[str, FileState]: ...

    def append(self, chunk: Chunk) -> Appended: ...

    def note(self, file_name: str, text: str) -> None: ...


@dataclass
class _Seen:
    """A file as the follower last saw it."""

    format: str | None = None
    mode: str = ""
    size: int = -1
    mtime: float = 0.0
    since: float = 0.0             # when it last changed (monotonic)
    stalled: tuple | None = None   # (size, mtime) at which it failed: retried when it changes
    sniffed_at: int = -1           # size when its format was last sniffed


class Follower:
    """Follows one directory into one run through a sink; `tick()` commits what is whole now.

    `final=True` says that the job is over: every step file and trace is complete as it is.
    `say` gets each warning once (a rotated file, a file that stopped parsing).
    """

    def __init__(self, root: Path, sink: Sink, *, settle_s: float = SETTLE_S, final: bool = False,
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic):
        self.root, self.sink, self.settle_s, self.final = Path(root), sink, settle_s, final
        self.say, self.clock = say, clock
        self.seen: dict[str, _Seen] = {}
        self.said: set[str] = set()
        self.states: dict[str, FileState] | None = None  # what the sink holds, asked on the first tick

    def tick(self) -> list[int]:
        """Commit every whole step there is now; the steps committed."""
        if self.states is None:
            self.states = self.sink.states()
            self.said.update(s.note for s in self.states.values() if s.note)
        files = self._listing()
        latest = _latest_steps(files)
        done: list[int] = []
        looked = {rel: self._look(rel, path, st) for rel, (path, st) in files.items()}
        # step files first: a DAPO filter line waits for its step's packed lengths
        for rel in sorted(looked, key=lambda rel: looked[rel].mode == "lines"):
            (path, st), seen = files[rel], looked[rel]
            if not seen.mode or seen.stalled == (st.st_size, st.st_mtime):
                continue
            try:
                if seen.mode == "lines":
                    done += self._lines(rel, path, st, seen)
                elif self._complete(rel, seen, latest):
                    done += self._whole(rel, path, st, seen)
            except Gap:  # the sink holds less than we thought (the run was deleted): ask it again
                self.states = None
                return sorted(set(done))
            except IngestError as e:
                seen.stalled = (st.st_size, st.st_mtime)
                self._warn(rel, f"{rel}: {e.reason}; it is left where it stopped until it changes")
        return sorted(set(done))

    def _listing(self) -> dict[str, tuple[Path, os.stat_result]]:
        """Every non-hidden regular file below the root (as a batch ingest of it reads them)."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = Path(dirpath, name)
                try:
                    st = path.stat()
                except OSError:
                    continue  # removed meanwhile
                if stat.S_ISREG(st.st_mode):
                    out[path.relative_to(self.root).as_posix()] = (path, st)
        return out

    def _look(self, rel: str, path: Path, st: os.stat_result) -> _Seen:
        seen = self.seen.setdefault(rel, _Seen(since=self.clock()))
        if (st.st_size, st.st_mtime) != (seen.size, seen.mtime):
            seen.size, seen.mtime, seen.since = st.st_size, st.st_mtime, self.clock()
        known = self.states.get(rel)
        if seen.format is None and known and known.format:
            seen.format = known.format
        # a file's format shows in its first bytes: sniff again while they are still coming
        if seen.format is None and st.st_size and seen.sniffed_at < min(st.st_size, HEAD_BYTES):
            seen.sniffed_at = min(st.st_size, HEAD_BYTES)
            try:
                fmt = registry.detect(path)
            except (IngestError, OSError):
                fmt = None
            seen.format = fmt.name if fmt and mode(fmt.name) else None
            if fmt and not mode(fmt.name):
                self._warn(rel, f"{rel}: {fmt.name} is not followed live; load it with `polytrace ingest`")
        if seen.format and not seen.mode:
            seen.mode = mode(seen.format, _gzipped(path))
        return seen

    def _lines(self, rel: str, path: Path, st: os.stat_result, seen: _Seen) -> list[int]:
        state = self.states.get(rel, FileState())
        identity = _identity(st)
        reset = False
        if state.committed and state.identity and state.identity != identity:
            self._warn(rel, f"{rel} was replaced (rotated): following the new file from its first byte")
            reset = True
        elif st.st_size < state.committed:
            self._warn(rel, f"{rel} shrank below the {state.committed} bytes already loaded (truncated): "
                            "following it again from its first byte")
            reset = True
        offset = 0 if reset else state.committed
        steps: list[int] = []
        with open(path, "rb") as f:
            while offset < st.st_size or reset:
                f.seek(offset)
                data = f.read(CHUNK_BYTES)
                if not whole_lines(data):
                    if len(data) >= CHUNK_BYTES:  # one line longer than a chunk: read until its end
                        data += f.read(MAX_LINE_BYTES)
                        if not whole_lines(data) and len(data) > MAX_LINE_BYTES:
                            raise IngestError(rel, f"a line longer than {MAX_LINE_BYTES >> 20} MB at byte {offset}")
                    if not whole_lines(data) and not reset:
                        break  # a last line without its newline waits for it
                got = self.sink.append(Chunk(rel, offset, data, format=seen.format, identity=identity,
                                             reset=reset))
                reset = False
                steps += got.steps
                self._said(got.notes)
                self._warned(rel, got.warnings)
                self.states[rel] = FileState(got.committed, seen.format, identity)
                if got.committed <= offset:
                    break  # nothing whole yet (a filter line waiting for its step's packed lengths)
                offset = got.committed
        return steps

    def _complete(self, rel: str, seen: _Seen, latest: dict[str, int]) -> bool:
        state = self.states.get(rel)
        if state and state.committed == seen.size and state.mtime == seen.mtime:
            return False  # committed as it is
        if self.final or self.clock() - seen.since >= self.settle_s:
            return True
        mine = kind_and_step(rel)
        return seen.mode == "step" and mine is not None and latest[mine[0]] > mine[1]

    def _whole(self, rel: str, path: Path, st: os.stat_result, seen: _Seen) -> list[int]:
        state = self.states.get(rel)
        if state and state.committed and seen.mode == "trace":
            self._warn(rel, f"{rel} changed after it was loaded; a trace is loaded once "
                            "(ingest the directory again to take the new one)")
            seen.stalled = (st.st_size, st.st_mtime)
            return []
        got = self.sink.append(Chunk(rel, 0, path=path, format=seen.format, complete=True,
                                     identity=_identity(st), mtime=st.st_mtime))
        self._said(got.notes)
        self._warned(rel, got.warnings)
        self.states[rel] = FileState(got.committed, seen.format, _identity(st), st.st_mtime, got.steps)
        if got.committed != st.st_size:  # it changed while it was read: take it when it settles again
            seen.since = self.clock()
        return got.steps

    def _said(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self.said:
                self.said.add(note)
                self.say(note)

    def _warned(self, rel: str, warnings: list[str]) -> None:
        """A parse's warnings, said as `polytrace ingest` says them (the sink has recorded them)."""
        for text in warnings:
            self.say(f"warning: {rel}: {text}")

    def _warn(self, rel: str, text: str) -> None:
        if text in self.said:
            return
        self.said.add(text)
        self.say(text)
        try:
            self.sink.note(rel, text)
        except (IngestError, OSError):
            pass  # what was said is said; keeping it is a courtesy


def _identity(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _gzipped(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError:
        return False


def kind_and_step(rel: str) -> tuple[str, int] | None:
    """packed_lengths_step_12.jsonl -> ('packed_lengths_step_#.jsonl', 12): its kind and step."""
    m = _STEP_NUMBER.search(rel)
    return (rel[:m.start()] + "#" + rel[m.end():], int(m.group(1))) if m else None


def _latest_steps(files: dict) -> dict[str, int]:
    """The latest step of each kind of step file: the files of earlier steps are complete."""
    latest: dict[str, int] = {}
    for name in files:
        mine = kind_and_step(name)
        if mine:
            latest[mine[0]] = max(latest.get(mine[0], mine[1]), mine[1])
    return latest

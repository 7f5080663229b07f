"""Following training runs as they write: inside the server that owns the DuckDB file
(`polytrace serve --watch DIR`), into a database file (`polytrace watch DIR --db FILE`), or toward
a running server through POST /api/runs/{id}/append (`polytrace watch DIR --server URL`).

Every path commits through the service layer's `append` (ingest.load.append_chunk: one transaction
with the file's committed offset). The run's line in the runs overview and its stored answers read every step of
the run, so they are kept off the append path: OverviewLines refreshes them at most every
OVERVIEW_EVERY_S during a burst of appends (less often for a run whose refresh is long, so that
it takes at most BUSY_SHARE of the time), and once more as soon as the run goes quiet; in a server
it sums the run up without holding the writer, which it takes only to keep the sums.
"""
from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import duckdb

from polytrace.ingest.contract import IngestError
from polytrace.ingest.live import (
    Appended,
    Chunk,
    FileState,
    Follower,
    Gap,
    file_states,
    live_run_id,
    record_note,
)
from polytrace import service
from polytrace.queries import overview
from polytrace.ingest.options import POLL_S, SETTLE_S, IngestOptions
from polytrace.server.headlines import step_span

Say = Callable[[str], None]


OVERVIEW_EVERY_S = 2.0   # during a burst of appends, a run's overview line at most this often
BUSY_SHARE = 0.2         # and its refresh (a core's work) at most this share of the time
QUIET_S = 1.0            # a run with no append for this long gets its line at once
DROPPED_AT_MOST = 3      # sums of a run written while they were made, dropped in a row at most


class OverviewLines:
    """The runs-overview lines of the live runs that changed, refreshed through `write(fn, runs)`:
    by flush() from a follower's loop, or by its own thread in a server (start()).

    Given `read(fn)` (fn on a cursor of the same database that does not hold the writer) and
    `generation(run)` (which changes with every write of the run), a refresh sums the run up
    without the writer and takes it only to keep the sums, so that appends do not wait for it;
    sums of a run written meanwhile are dropped, and after DROPPED_AT_MOST in a row the run's next
    refresh holds the writer throughout (a run appended to faster than it sums up gets its line)."""

    def __init__(self, write: Callable[..., Any], clock: Callable[[], float] = time.monotonic,
                 read: Callable[..., Any] | None = None, generation: Callable[[str], Any] | None = None):
        self.write, self.clock, self.read, self.generation = write, clock, read, generation
        self._marked: dict[str, float] = {}     # run -> its last append
        self._refreshed: dict[str, float] = {}  # run -> its line's last refresh
        self._took: dict[str, float] = {}       # run -> how long that refresh took (s)
        self._dropped: dict[str, int] = {}      # run -> its sums dropped in a row
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark(self, run_id: str) -> None:
        with self._lock:
            self._marked[run_id] = self.clock()

    def flush(self, force: bool = False) -> list[str]:
        """Refresh the lines that are due (all marked ones with `force`); returns their runs. A run
        stays pending until its refresh is written, and after it if it had another append since."""
        now_s = self.clock()
        with self._lock:
            due = {r: at for r, at in self._marked.items()
                   if force or now_s - at >= QUIET_S or now_s - self._refreshed.get(r, 0) >= self._every(r)}
            for r in due:
                self._refreshed[r] = now_s
        for run_id, marked_at in due.items():
            took = self._sum_up(run_id)
            with self._lock:
                self._took[run_id] = took
                if self._marked.get(run_id) == marked_at:
                    del self._marked[run_id]
        return list(due)

    def _sum_up(self, run_id: str) -> float:
        """Refresh the run's line and answers; how long the summing took (s), a wait for the writer
        left out. Its write names no run (write(fn, [])): the answers it keeps are those a reader
        computes without them, so the run's ETag stays (a page that follows the run is not sent
        what it has), while the run list's moves with every write."""
        if self.read is None or self.generation is None or self._dropped.get(run_id, 0) >= DROPPED_AT_MOST:
            self._dropped.pop(run_id, None)
            return self.write(partial(self._refresh, run_id=run_id), [])
        before = self.generation(run_id)
        started = self.clock()
        sums = self.read(partial(overview.summed, run_ids=[run_id]))
        took = self.clock() - started
        if self.write(partial(self._keep, run_id=run_id, sums=sums, before=before), []):
            self._dropped.pop(run_id, None)
        else:
            self._dropped[run_id] = self._dropped.get(run_id, 0) + 1
        return took

    def _refresh(self, con, run_id: str) -> float:
        started = self.clock()
        service.refresh(con, [run_id])
        return self.clock() - started

    def _keep(self, con, run_id: str, sums: tuple, before: Any) -> bool:
        """Keep the run's sums unless it was written since they began (then they are not its own)."""
        if self.generation(run_id) != before:
            return False
        service.keep_sums(con, [run_id], sums)
        return True

    def _every(self, run_id: str) -> float:
        """Seconds between two refreshes of the run during a burst of appends."""
        return max(OVERVIEW_EVERY_S, self._took.get(run_id, 0.0) / BUSY_SHARE)

    def start(self) -> OverviewLines:
        self._thread = threading.Thread(target=self._run, name="polytrace-overview", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(QUIET_S / 2):
            try:
                self.flush()
            except duckdb.Error as e:  # said, and tried again at the next append
                print(f"overview: {e}", file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        self.flush(force=True)


@dataclass
class DatabaseSink:
    """A follower's commits into a database: a DuckDB connection (the CLI's) or, through `write`, the
    server's one writer (which then knows the run changed, for its ETags)."""

    run_id: str
    name: str
    source: str
    write: Callable[[Callable], Any]
    lines: OverviewLines | None = None  # None: the run's overview line right after each append
    options: IngestOptions | None = None  # the ingest's limits and tokenizer, from the settings

    def states(self) -> dict[str, FileState]:
        return self.write(lambda con: file_states(con, self.run_id))

    def append(self, chunk: Chunk) -> Appended:
        return self.write(lambda con: service.append(con, self.run_id, chunk, name=self.name, source=self.source,
                                                     options=self.options, lines=self.lines))

    def note(self, file_name: str, text: str) -> None:
        self.write(lambda con: record_note(con, self.run_id, file_name, text))


def sinks_into(con, lines: OverviewLines | None = None, options: IngestOptions | None = None
               ) -> Callable[[str, str, str], DatabaseSink]:
    """A follower's sinks into a connection this process alone writes with (`watch --db`); without
    `lines`, each append refreshes its run's overview line at once."""
    return lambda run_id, name, source: DatabaseSink(run_id, name, source, lambda fn: fn(con), lines, options)


@dataclass
class ServerSink:
    """A follower's commits pushed to a server: POST /api/runs/{id}/append with the file's bytes
    from an offset; the server answers what it has committed."""

    url: str
    run_id: str
    name: str
    source: str
    token: str | None = None
    timeout_s: float = 60

    def states(self) -> dict[str, FileState]:
        try:
            body = self._call("GET", f"/api/runs/{self.run_id}/live")
        except Refused as e:
            if e.status == 404:  # no such run yet: its first append makes it
                return {}
            raise
        return {name: FileState(f["committed"], f["format"], f["identity"], f["mtime"], f["steps"] or [],
                                f["note"]) for name, f in body["files"].items()}

    def append(self, chunk: Chunk) -> Appended:
        data = chunk.data if chunk.data is not None else chunk.path.read_bytes()
        params = {"file": chunk.file_name, "offset": chunk.offset, "name": self.name, "source": self.source,
                  **{k: v for k, v in (("format", chunk.format), ("identity", chunk.identity),
                                       ("mtime", None if chunk.mtime is None else repr(chunk.mtime)))
                     if v is not None},
                  **({"complete": "true"} if chunk.complete else {}), **({"reset": "true"} if chunk.reset else {})}
        body = self._call("POST", f"/api/runs/{self.run_id}/append?{urllib.parse.urlencode(params)}", data)
        return Appended(body["committed"], body["steps"], body["rows"], body["notes"], body.get("warnings", []))

    def note(self, file_name: str, text: str) -> None:
        """What the pusher says about its files stays with it: the server records its own notes."""

    def _call(self, method: str, path: str, data: bytes | None = None) -> dict:
        headers = {"Content-Type": "application/octet-stream"} if data is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            body = _error_body(e)
            error = body.get("error", str(e.reason))
            if e.code == 409 and "offset" in body:
                raise Gap(path, int(body["offset"])) from None
            if e.code in (401, 403) or e.code >= 500:  # about every file: said, and tried again
                raise ConnectionError(f"{self.url} answered {e.code}: {error}") from None
            raise Refused(e.code, error) from None
        except (urllib.error.URLError, OSError) as e:
            raise ConnectionError(f"cannot reach {self.url} ({getattr(e, 'reason', e)}); trying again") from None


class Refused(IngestError):
    """The server refused a file's bytes (or knows no such run): its status and one-line error."""

    def __init__(self, status: int, error: str):
        super().__init__(None, f"the server answered {status}: {error}")
        self.status = status


def _error_body(e: urllib.error.HTTPError) -> dict:
    try:
        return json.loads(e.read())
    except ValueError:
        return {}


def follower(directory: Path, sink_for: Callable[[str, str, str], Any], *, settle_s: float = SETTLE_S,
             final: bool = False, say: Say) -> Follower:
    """A follower of `directory` into the run named after it, whose id the directory's path gives."""
    source = str(directory)
    run_id = live_run_id(directory)
    return Follower(directory, sink_for(run_id, Path(directory).resolve().name, source), settle_s=settle_s,
                    final=final, say=say)


def follow(followers: list[Follower], stop: threading.Event, poll_s: float = POLL_S, say: Say = print,
           once: bool = False, lines: OverviewLines | None = None) -> bool:
    """Tick every follower until `stop` is set (or once), saying which steps each appended; a
    failing tick is said once and retried. `lines` (a follower's own, without a thread of its
    own) is flushed after every round. Whether every tick of the last round went through."""
    said = set()
    while True:
        failed = False
        for f in followers:
            try:
                if steps := f.tick():
                    say(f"{f.root}: {step_span(steps)} appended")
            except (IngestError, OSError, duckdb.Error) as e:
                failed = True
                text = f"{f.root}: {e}"
                if text not in said:
                    said.add(text)
                    say(text)
        if lines:
            lines.flush(force=once)
        if once or stop.wait(poll_s):
            return not failed


class Watching:
    """The server's followers, on one thread that commits through the server's one writer."""

    def __init__(self, db, lines: OverviewLines, directories: list[Path], *, settle_s: float = SETTLE_S,
                 poll_s: float = POLL_S, say: Say | None = None, options: IngestOptions | None = None):
        self.db, self.lines, self.poll_s, self.options = db, lines, poll_s, options
        self.say = say or (lambda text: print(f"watch: {text}", file=sys.stderr))
        self.directories = [Path(d) for d in directories]
        self.settle_s = settle_s
        self.runs = {live_run_id(d): d for d in self.directories}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="polytrace-watch", daemon=True)

    def _sink(self, run_id: str, name: str, source: str) -> DatabaseSink:
        return DatabaseSink(run_id, name, source, lambda fn: self.db.write(fn, runs=[run_id]), self.lines,
                            self.options)

    def _run(self) -> None:
        followers = [follower(d, self._sink, settle_s=self.settle_s, say=self.say) for d in self.directories]
        for run_id in self.runs:  # a server killed between an append and its line: the line, again
            self.lines.mark(run_id)
        follow(followers, self._stop, self.poll_s, self.say)

    def start(self) -> Watching:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

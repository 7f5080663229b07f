"""SIGKILL during an ingest (CLI or server upload) leaves no partial run, and the ingest then succeeds."""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from polytrace import store
from polytrace.ingest.load import ingest_paths
from tests.conftest import ROOT, free_port

STEPS, PROMPTS, N_SAMPLING = 2, 50_000, 8  # 800,000 samples in about 18 MB


@dataclass(frozen=True)
class Trace:
    path: Path
    samples: int
    response_sum: int


def write_packed(path: Path, steps: int, prompts: int, seed: int) -> Trace:
    """A packed_lengths file with random lengths; returns what a full ingest must hold."""
    rng = random.Random(seed)
    total = 0
    with open(path, "w") as f:
        for step in range(steps):
            for i in range(prompts):
                outs = [rng.randint(1, 16_000) for _ in range(N_SAMPLING)]
                total += sum(outs)
                f.write(f'{{"step": {step}, "rank": {4 * (i % 2)}, "dp_rank": {i % 2}, "tp_rank": 0, '
                        f'"local_index": {i}, "input": {rng.randint(50, 900)}, "output": {outs}, '
                        f'"n_sampling": {N_SAMPLING}, "validate": false}}\n')
    return Trace(path, steps * prompts * N_SAMPLING, total)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Trace:
    return write_packed(tmp_path_factory.mktemp("trace") / "packed_lengths_step_0.jsonl",
                        STEPS, PROMPTS, seed=1)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """A database that already holds one small run, checkpointed and closed."""
    folder = tmp_path_factory.mktemp("baseline")
    small = write_packed(folder / "small.jsonl", 2, 10, seed=2)
    con = store.open(folder / "base.duckdb")
    ingest_paths(con, [small.path])
    con.close()
    return folder / "base.duckdb"


def db_state(db: Path) -> dict:
    """Runs and their sample counts, plus samples whose run has no runs row."""
    con = store.open(db)
    try:
        runs = dict(con.execute(
            "SELECT r.run_id, count(s.run_id) FROM runs r LEFT JOIN samples s USING (run_id) "
            "GROUP BY r.run_id").fetchall())
        orphans = con.execute(
            "SELECT count(*) FROM samples WHERE run_id NOT IN (SELECT run_id FROM runs)").fetchone()[0]
        sums = dict(con.execute(
            "SELECT run_id, sum(response_len)::BIGINT FROM samples GROUP BY run_id").fetchall())
    finally:
        con.close()
    return {"runs": runs, "orphans": orphans, "sums": sums}


def assert_whole_or_absent(before: dict, after: dict, trace: Trace) -> str:
    """No partial run: the old runs are untouched and the new one is either absent or complete."""
    assert after["orphans"] == 0
    new = {r: n for r, n in after["runs"].items() if r not in before["runs"]}
    assert {r: after["runs"][r] for r in before["runs"]} == before["runs"]
    if not new:
        return "absent"
    (run_id, n), = new.items()
    assert n == trace.samples and after["sums"][run_id] == trace.response_sum
    return "complete"


class Probe:
    """What a poll can see of a running ingest: its database files and its process."""

    def __init__(self, pid: int, db: Path, input_bytes: int):
        self.pid, self.db, self.input_bytes = pid, db, input_bytes
        self.db0 = db.stat().st_size

    @property
    def db_bytes(self) -> int:
        return self.db.stat().st_size

    @property
    def wal_bytes(self) -> int:
        wal = Path(f"{self.db}.wal")
        return wal.stat().st_size if wal.exists() else 0

    @property
    def read_bytes(self) -> int:
        """Bytes the process has read so far (rchar: never goes down)."""
        with open(f"/proc/{self.pid}/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))

    def mapped(self, library: str) -> bool:
        with open(f"/proc/{self.pid}/maps") as f:
            return library in f.read()


# Kill points, each a state of the ingest that holds from some moment on, so that a poll
# cannot miss it. The ingest reads its input twice, to hash it and then to parse it, and
# only after parsing does it write to the database.
TRIGGERS = {
    "started": lambda p: True,
    "imports done (pyarrow loaded)": lambda p: p.mapped("libarrow"),
    "parsing (the input read twice: hashed, then parsed)": lambda p: p.read_bytes >= 2 * p.input_bytes,
    "load began (database file grows)": lambda p: p.db_bytes > p.db0,
    "mid load (database file +2 MB)": lambda p: p.db_bytes > p.db0 + 2 * 1024**2,
    # DuckDB writes a big insert's row groups into the file first; the commit then logs them
    "commit (WAL grows)": lambda p: p.db_bytes > p.db0 and p.wal_bytes > 16 * 1024,
}


def kill_when(proc: subprocess.Popen, probe: Probe, trigger) -> bool:
    """Poll the process and the database files; SIGKILL as soon as the trigger holds.
    Returns whether it was killed, False when it exited first."""
    while proc.poll() is None:
        try:
            fired = trigger(probe)
        except (FileNotFoundError, ProcessLookupError):  # the process is exiting
            fired = False
        if fired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.001)
    return False


@pytest.mark.parametrize("point", list(TRIGGERS))
def test_cli_ingest_killed(point, big, baseline, tmp_path):
    db = tmp_path / "crash.duckdb"
    shutil.copy(baseline, db)
    before = db_state(db)
    proc = subprocess.Popen([sys.executable, "-m", "polytrace", "ingest", str(big.path), "--db", str(db)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killed = kill_when(proc, Probe(proc.pid, db, big.path.stat().st_size), TRIGGERS[point])
    if point != "commit (WAL grows)":
        assert killed, f"the ingest finished before the kill point {point!r}"
    size_after_kill = db.stat().st_size

    outcome = assert_whole_or_absent(before, db_state(db), big)
    if killed and point != "commit (WAL grows)":
        assert outcome == "absent"

    con = store.open(db)
    result = ingest_paths(con, [big.path])
    con.close()
    assert result.existing == (outcome == "complete")
    assert assert_whole_or_absent(before, db_state(db), big) == "complete"
    print(f"{point}: {'killed' if killed else 'exited first'}, run {outcome}, "
          f"db {size_after_kill} B after kill, {db.stat().st_size} B after re-ingest")


# --- the server, killed mid-upload ---------------------------------------------------------------

class Server:
    """`polytrace serve` in a subprocess, so that it can be SIGKILLed."""

    def __init__(self, db: Path, port: int, tmp: Path, env: dict[str, str] | None = None):
        env = {**os.environ, "TMPDIR": str(tmp), "POLYTRACE_HOST": "127.0.0.1", **(env or {})}
        env.pop("POLYTRACE_TOKEN", None)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "polytrace", "serve", "--db", str(db), "--port", str(port)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {self.proc.stderr.read().decode()[-500:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stderr.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.proc.stderr.close()


BOUNDARY = "polytrace-crash-test"


def multipart(paths: list[Path], pause_every: int | None = None):
    """A multipart body streamed in 1 MiB chunks, pausing 50 ms every `pause_every` chunks."""
    for path in paths:
        yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"{path.name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        with open(path, "rb") as f:
            for i, chunk in enumerate(iter(lambda: f.read(1 << 20), b"")):
                yield chunk
                if pause_every and i % pause_every == 0:
                    time.sleep(0.05)
        yield b"\r\n"
    yield f"--{BOUNDARY}--\r\n".encode()


def upload(url: str, paths: list[Path], pause_every: int | None = None) -> httpx.Response:
    return httpx.post(f"{url}/api/runs", content=multipart(paths, pause_every), timeout=120,
                      headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})


def upload_in_thread(url: str, paths: list[Path], pause_every: int | None) -> threading.Thread:
    def run():
        try:
            upload(url, paths, pause_every)
        except httpx.TransportError:
            pass  # the server died under it: expected

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def received_bytes(tmp: Path) -> int:
    return sum(f.stat().st_size for d in tmp.glob("polytrace-upload-*") for f in d.rglob("*") if f.is_file())


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def server_files(baseline: Path, tmp_path: Path, uploads: Path) -> tuple[Path, Path, int]:
    """A copy of the baseline database, the directory for the server's uploads, a free port."""
    db = tmp_path / "server.duckdb"
    shutil.copy(baseline, db)
    return db, uploads, free_port()


def test_server_killed_mid_upload_and_mid_load(big, baseline, tmp_path, uploads_dir):
    db, uploads, port = server_files(baseline, tmp_path, uploads_dir)
    before = db_state(db)

    # 1. killed while the body is still arriving (3 MiB of 18 received)
    srv = Server(db, port, uploads)
    thread = upload_in_thread(srv.url, [big.path], pause_every=1)
    wait_for(lambda: received_bytes(uploads) > 3 * 1024**2, "the upload to start arriving")
    srv.kill()
    thread.join(timeout=30)
    assert assert_whole_or_absent(before, db_state(db), big) == "absent"

    # 2. killed while the received file is being written into the database
    srv = Server(db, port, uploads)
    db0 = db.stat().st_size
    thread = upload_in_thread(srv.url, [big.path], pause_every=None)
    wait_for(lambda: db.stat().st_size > db0, "the load to start")
    srv.kill()
    thread.join(timeout=30)
    assert assert_whole_or_absent(before, db_state(db), big) == "absent"
    stale = sorted(p.name for p in uploads.glob("polytrace-upload-*"))

    # 3. restarted on the same file: nothing partial is listed, and the same upload succeeds
    srv = Server(db, port, uploads)
    try:
        listed = httpx.get(f"{srv.url}/api/runs", timeout=30).json()["runs"]
        assert sorted(r["run_id"] for r in listed) == sorted(before["runs"])
        response = upload(srv.url, [big.path])
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        listed = {r["run_id"]: r for r in httpx.get(f"{srv.url}/api/runs", timeout=30).json()["runs"]}
        assert listed[run_id]["samples"] == big.samples
    finally:
        srv.stop()
    assert assert_whole_or_absent(before, db_state(db), big) == "complete"
    print(f"stale upload directories left by the two kills: {len(stale)}")


# --- parse workers, when the server is killed --------------------------------------------------

@pytest.fixture(scope="module")
def second(tmp_path_factory) -> Trace:
    """With `big`, more than ingest.load.PARALLEL_MIN_BYTES: an upload parsed by workers."""
    return write_packed(tmp_path_factory.mktemp("trace") / "packed_lengths_step_1.jsonl",
                        3, PROMPTS, seed=3)


def parent_pids() -> dict[int, int]:
    """Every live process and its parent (zombies excluded)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                state, ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state not in "ZX":
                out[int(d.name)] = int(ppid)
    return out


def descendants(pid: int) -> set[int]:
    ppids, found, frontier = parent_pids(), set(), {pid}
    while frontier:
        frontier = {p for p, parent in ppids.items() if parent in frontier} - found
        found |= frontier
    return found


def parse_workers(server: int) -> set[int]:
    """Processes forked by a forkserver the server started."""
    ppids = parent_pids()
    forkservers = {p for p, parent in ppids.items() if parent == server and b"forkserver" in cmdline(p)}
    return {p for p, parent in ppids.items() if parent in forkservers}


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def sockets(pid: int) -> set[str]:
    """The socket inodes a process holds open."""
    out = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:"):
            out.add(link)
    return out


def test_parse_workers_hold_no_server_socket_and_die_with_the_server(big, second, baseline, tmp_path, uploads_dir):
    db, uploads, port = server_files(baseline, tmp_path, uploads_dir)
    before = db_state(db)
    srv = Server(db, port, uploads, env={"POLYTRACE_PARSE_JOBS": "2"})
    pid = srv.proc.pid
    try:
        thread = upload_in_thread(srv.url, [big.path, second.path], pause_every=None)
        wait_for(lambda: parse_workers(pid), "parse workers to start")
        tree = parse_workers(pid) | descendants(pid)
        listening = sockets(pid)
        assert listening
        # forked by a fresh forkserver, not by the server: none of its sockets, the listening one included
        assert {child: sockets(child) & listening for child in tree} == {child: set() for child in tree}
    finally:
        srv.kill()
    thread.join(timeout=30)
    wait_for(lambda: not tree & set(parent_pids()), "the server's helper processes to exit")
    # nothing holds the port any more
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    assert assert_whole_or_absent(before, db_state(db), big) == "absent"

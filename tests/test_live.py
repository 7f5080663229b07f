"""Following a run while it trains: a real verl log and DAPO packed lengths played into a watched
directory by another process, against a batch ingest of the same bytes at each step, through
SIGKILLs of the follower, and on an open run page in Chromium."""
from __future__ import annotations

import json
import math
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from polytrace import store
from polytrace.ingest.live import Chunk, Gap, live_run_id
from polytrace.ingest.load import append_chunk, ingest_paths
from polytrace.queries import overview, render
from polytrace.queries.catalog import load_catalog
from polytrace.queries.runner import run
from polytrace.server.headlines import step_span
from polytrace.server.responses import Json
from polytrace.server.routers.runs import _run_detail
from polytrace.server.watch import follow, follower, sinks_into
from tests import test_browser
from tests.conftest import ROOT, SHARED_DATA, free_port
from tests.test_browser import console_errors, open_page, screenshot

# Chromium and a page of it that records console errors, as the dashboard's browser tests have them
browser, page = test_browser.browser, test_browser.page

LOG = "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log"
DAPO = "polytrace/verl/profile/packed_length_log/20260614_023133"
FILTER = "dapo_filter_indices.jsonl"
LOG_STEPS = 24          # step lines of the log played (its steps 0-23)
SETTLE = "0.3"          # the followers' settle time in these tests (s)
WAIT_S = 60             # the longest any wait loop here waits


# --- the replay: what a training job writes, unit by unit -----------------------------------------

def plan(data: Path, log_steps: int = LOG_STEPS) -> list[list[tuple[str, bytes]]]:
    """Units of writes (file, bytes) in the order a DAPO job writes them: the log's preamble, then
    each step's lines (those since the step before, ending with its step line), and every third
    step a packed-lengths file, then its filter line."""
    lines = [line + b"\n" for line in (data / LOG).read_bytes().split(b"\n")]
    starts = [i for i, line in enumerate(lines) if line.startswith(b"step:")][:log_steps]
    filters = (data / DAPO / FILTER).read_bytes().splitlines(keepends=True)
    packed = sorted((data / DAPO).glob("packed_lengths_step_*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    units, done = [[("output.log", b"".join(lines[:starts[0]]))]], starts[0]
    for k, start in enumerate(starts):
        units.append([("output.log", b"".join(lines[done:start + 1]))])
        done = start + 1
        if k % 3 == 1 and packed:
            step_file = packed.pop(0)
            units.append([(step_file.name, step_file.read_bytes())])
            units.append([(FILTER, filters.pop(0))])
    return units


def play(unit: list[tuple[str, bytes]], root: Path, pause_s: float) -> None:
    """Write a unit as a job would: a log line in two writes (a reader sees half a line), a step file
    in two halves."""
    for name, data in unit:
        half = len(data) // 2
        with open(root / name, "ab") as f:
            for part in (data[:half], data[half:]):
                f.write(part)
                f.flush()
                time.sleep(pause_s)


def replay(root: str, data: str, lockstep: bool, pause_s: float = 0.02, seed: int = 0) -> None:
    """The writer process: each unit, then (lockstep) wait for 'next' on stdin, else a short pause."""
    rng = random.Random(seed)
    for i, unit in enumerate(plan(Path(data))):
        play(unit, Path(root), pause_s)
        print(f"done {i}", flush=True)
        if lockstep:
            if sys.stdin.readline().strip() != "next":
                return
        else:
            time.sleep(rng.uniform(0.02, 0.12))
    print("end", flush=True)


def writer(root: Path, lockstep: bool, seed: int = 0) -> subprocess.Popen:
    code = f"from tests.test_live import replay; replay({str(root)!r}, {str(SHARED_DATA)!r}, {lockstep}, seed={seed})"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


# --- the two sides: the live run as the server answers, a batch ingest of the same bytes ------------

def per_run_queries() -> list[str]:
    return sorted(q.name for q in load_catalog().values()
                  if any(p.name == "run_id" for p in q.params)
                  and all(p.name == "run_id" or not p.required for p in q.params))


def encoded(body) -> dict:
    """A body as the API writes it (NaN as null), read back."""
    return json.loads(Json(body).body)


def normal(detail: dict) -> dict:
    """A run's detail without what names the attempt rather than the data: its id, digest, times."""
    run = {k: v for k, v in detail["run"].items() if k not in ("run_id", "sha256", "created_at")}
    ingests = sorted((i["file_name"], i["format"], i["bytes"], i["rows"], i["status"]) for i in detail["ingests"])
    return {"run": run, "ingests": ingests, "rows": detail["rows"]}


def listed(rows: list[dict], run_id: str) -> dict:
    (row,) = [r for r in rows if r["run_id"] == run_id]
    return {k: v for k, v in row.items() if k not in ("run_id", "created_at")}


def batch_answers(root: Path, shown: str, name: str, queries: list[str]) -> dict:
    """What a batch ingest of the directory's bytes answers, with the live run's id in its place."""
    con = store.open(":memory:")
    try:
        rid = ingest_paths(con, [root], name=name, names={root: shown}).run_id
        overview.refresh(con, [rid])
        out = {"run": normal(encoded(_run_detail(rid, con)))}
        for name_ in ("runs", "runs_overview"):
            answer = render.records(run(con, load_catalog()[name_], {}))
            out[name_] = listed(encoded(answer), rid)
        for q in queries:
            out[q] = encoded(render.json_body(run(con, load_catalog()[q], {"run_id": rid})))
        return json.loads(json.dumps(out).replace(rid, "RUN"))
    finally:
        con.close()


def live_answers(url: str, run_id: str, queries: list[str]) -> dict:
    with httpx.Client(base_url=url, timeout=60) as client:
        out = {"run": normal(client.get(f"/api/runs/{run_id}").json())}
        out["runs"] = listed(client.get("/api/runs").json()["runs"], run_id)
        out["runs_overview"] = listed(render_rows(client.get("/api/queries/runs_overview").json()), run_id)
        for q in queries:
            out[q] = client.get(f"/api/queries/{q}", params={"run_id": run_id}).json()
    return json.loads(json.dumps(out).replace(run_id, "RUN"))


def render_rows(body: dict) -> list[dict]:
    return [dict(zip(body["columns"], r)) for r in body["rows"]]


def same(a, b) -> bool:
    """Equal, floats up to their last bits: a sum over the same values in another row order (the
    live run's rows land step by step) may round differently in its last place."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def differences(live: dict, batch: dict) -> list[str]:
    """The answers (by name) that differ."""
    return [k for k in batch if not same(live.get(k), batch[k])]


# --- the follower processes -----------------------------------------------------------------------

def serve(db: Path, root: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "polytrace", "serve", "--db", str(db), "--port", str(port),
                             "--watch", str(root), "--settle", SETTLE, "--poll", "0.1"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)


def watcher(db: Path, root: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "polytrace", "watch", str(root), "--db", str(db),
                             "--settle", SETTLE, "--poll", "0.1", *extra], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)


def up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no server at {url} after {WAIT_S} s")


def caught_up(url: str, run_id: str, root: Path) -> dict:
    """Wait until the run holds every byte of every file below root: the live status then."""
    want = {p.name: p.stat().st_size for p in root.iterdir()}
    deadline, status = time.monotonic() + WAIT_S, None
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/api/runs/{run_id}/live", timeout=10)
        if r.status_code == 200:
            status = r.json()
            if {n: f["committed"] for n, f in status["files"].items()} == want:
                return status
        time.sleep(0.05)
    raise AssertionError(f"the run did not catch up with {want}: {status}")


def overview_caught_up(url: str, run_id: str, queries: list[str], batch: dict) -> dict:
    """The live answers once the run's overview line, which the server refreshes off the append
    path (at once when the run goes quiet), counts the steps that landed."""
    deadline, live = time.monotonic() + WAIT_S, {}
    while time.monotonic() < deadline:
        live = live_answers(url, run_id, queries)
        if same(live["runs_overview"], batch["runs_overview"]):
            break
        time.sleep(0.2)
    return live


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def watched(tmp_path, shared_data) -> Path:
    root = tmp_path / "qwen3-4b-live"
    root.mkdir()
    return root


# --- tests -------------------------------------------------------------------------------------

def test_each_step_answers_as_a_batch_ingest_of_the_same_bytes(watched, tmp_path):
    """The writer plays a unit, the server follows; then every per-run catalog query, the run's
    detail and its lines in the runs lists equal a batch ingest of the directory as it is."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(tmp_path / "live.duckdb", watched, port)
    job = writer(watched, lockstep=True)
    run_id, queries, checked = live_run_id(watched), per_run_queries(), []
    try:
        up(url, server)
        assert job.stdout.readline().startswith("done 0")  # the preamble: no step yet
        caught_up(url, run_id, watched)
        for _ in range(200):  # bounded: the plan has fewer units
            job.stdin.write("next\n")
            job.stdin.flush()
            line = job.stdout.readline()
            if not line.startswith("done"):
                break
            status = caught_up(url, run_id, watched)
            batch = batch_answers(watched, str(watched), watched.name, queries)
            live = overview_caught_up(url, run_id, queries, batch)
            assert differences(live, batch) == [], (line, {k: (live.get(k), batch[k]) for k in differences(live, batch)})
            checked.append(status["last_step"])
    finally:
        job.kill()
        stop(server)
    # every unit was checked: the log's steps 0-23, and 6 packed-lengths steps with their filter lines
    assert len(checked) == LOG_STEPS + 2 * 6
    assert max(checked) == LOG_STEPS - 1


TABLES = ("samples", "step_metrics", "turns", "tool_calls", "rank_stage", "gpu_events", "gpu_step_time",
          "profiler_steps", "step_lengths", "step_ranks", "step_turns")


def state(con, run_id: str) -> dict:
    """A run's rows in every table the replay fills (and two aggregates), and its detail."""
    tables = {t: con.execute(f'SELECT * EXCLUDE (run_id) FROM "{t}" WHERE run_id = ? ORDER BY ALL',
                             [run_id]).fetchall() for t in TABLES}
    return {"tables": tables, "run": normal(encoded(_run_detail(run_id, con)))}


def final_state(db: Path, root: Path) -> dict:
    """The followed run as its database holds it, with its files' committed offsets."""
    con = store.open(db, "r")
    try:
        run_id = live_run_id(root)
        files = dict(con.execute("SELECT file_name, committed FROM live_files WHERE live_run = ?",
                                 [run_id]).fetchall())
        return {**state(con, run_id), "files": files}
    finally:
        con.close()


def batch_state(root: Path) -> dict:
    """A batch ingest of the directory's bytes, with every file whole."""
    con = store.open(":memory:")
    try:
        rid = ingest_paths(con, [root], name=root.name, names={root: str(root)}).run_id
        return {**state(con, rid), "files": {p.name: p.stat().st_size for p in root.iterdir()}}
    finally:
        con.close()


def kill_during_replay(root: Path, start, seed: int) -> None:
    """Play the whole plan at its own pace while the follower is SIGKILLed at a few seeded random
    moments and started again."""
    rng = random.Random(seed)
    job = writer(root, lockstep=False, seed=seed)
    proc = start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 2.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            proc = start()
        assert job.wait(timeout=WAIT_S) == 0
    finally:
        job.kill()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("seed", [7, 1234])
def test_a_watcher_killed_mid_replay_resumes_with_no_duplicate_and_no_missing_step(watched, tmp_path, seed):
    db = tmp_path / "watched.duckdb"
    kill_during_replay(watched, lambda: watcher(db, watched), seed)
    # the job is over: one last pass takes every file as it is
    finish = watcher(db, watched, "--once")
    assert finish.wait(timeout=WAIT_S) == 0, finish.stderr.read()
    assert same(final_state(db, watched), batch_state(watched))


def test_a_server_killed_mid_replay_resumes_with_no_duplicate_and_no_missing_step(watched, tmp_path):
    db = tmp_path / "served.duckdb"
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def start():
        proc = serve(db, watched, port)
        up(url, proc)
        return proc

    kill_during_replay(watched, start, seed=42)
    proc = start()
    try:
        caught_up(url, live_run_id(watched), watched)
    finally:
        stop(proc)
    assert same(final_state(db, watched), batch_state(watched))


@pytest.mark.parametrize("folder", [
    "polytrace/rllm/profile/packed_length_log/20260616_024512",          # packed lengths, reward timings
    "polytrace/search_r1/profile/multiturn_workload_log/0617_0223",      # multi-turn rollouts
    "kineto/trace_filter",                                             # Kineto traces
])
def test_following_a_finished_job_equals_its_batch_ingest(shared_data, tmp_path, folder):
    """Each followed format, through the append path, ends where a batch ingest of its files does."""
    import shutil


    root = tmp_path / Path(folder).name
    shutil.copytree(shared_data / folder, root)
    db = tmp_path / "followed.duckdb"
    con = store.open(db)
    f = follower(root, sinks_into(con), final=True, say=print)
    assert f.tick()
    con.close()
    assert same(final_state(db, root), batch_state(root))

# --- the append path on its own: offsets, gaps, resends, rotation ----------------------------------

PACKED = (b'{"step": 0, "rank": 0, "dp_rank": 0, "input": 10, "output": [1, 3]}\n'
          b'{"step": 0, "rank": 4, "dp_rank": 1, "input": 20, "output": [5, 7]}\n')


def test_appends_are_idempotent_and_a_gap_names_the_offset_to_resend_from(con):
    log = b"step:1 - timing_s/step:10.0 - actor/lr:1e-06\nstep:2 - timing_s/step:8.0\nstep:3 - timing_s/step"
    got = append_chunk(con, "live1", Chunk("output.log", 0, log, format="verl-console"), name="r")
    assert (got.committed, got.steps) == (log.rfind(b"\n") + 1, [1, 2])   # the half line waits
    again = append_chunk(con, "live1", Chunk("output.log", 0, log, format="verl-console"))
    assert (again.committed, again.steps, again.rows) == (got.committed, [], 0)  # a resend changes nothing
    with pytest.raises(Gap) as gap:
        append_chunk(con, "live1", Chunk("output.log", got.committed + 5, b"step:9 - x:1\n"))
    assert gap.value.offset == got.committed
    rest = append_chunk(con, "live1", Chunk("output.log", got.committed, log[got.committed:] + b":1.5\n"))
    assert rest.steps == [3]
    # a step logged again replaces its values key by key, as a batch ingest keeps the last value
    again = append_chunk(con, "live1", Chunk("output.log", rest.committed, b"step:2 - timing_s/step:9.0\n"))
    assert again.steps == [2] and again.rows == 0
    assert con.execute("SELECT step, key, value FROM step_metrics WHERE run_id = 'live1' ORDER BY ALL").fetchall() == [
        (1, "actor/lr", 1e-06), (1, "timing_s/step", 10.0), (2, "timing_s/step", 9.0), (3, "timing_s/step", 1.5)]


def test_a_second_writer_of_the_same_bytes_with_other_content_is_refused_naming_the_committed_offset(con):
    from polytrace.ingest.live import Diverged

    first = b"step:1 - timing_s/step:10.0\nstep:2 - timing_s/step:8.0\n"
    other = b"step:1 - timing_s/step:10.0\nstep:2 - timing_s/step:9.0\n"  # same length, one byte differs
    got = append_chunk(con, "live1", Chunk("output.log", 0, first, format="verl-console"), name="r")
    with pytest.raises(Diverged) as diverged:
        append_chunk(con, "live1", Chunk("output.log", 0, other + b"step:3 - timing_s/step:7.0\n"))
    assert diverged.value.offset == got.committed == len(first)
    assert "differ from the ones the run holds up to byte 55" in str(diverged.value)
    # nothing of it was taken; the same bytes again, and more, are
    assert con.execute("SELECT count(*) FROM step_metrics WHERE run_id = 'live1'").fetchall() == [(2,)]
    more = append_chunk(con, "live1", Chunk("output.log", 0, first + b"step:3 - timing_s/step:7.0\n"))
    assert more.steps == [3]
    # a resend that overlaps only the last committed bytes is checked on them too
    with pytest.raises(Diverged):
        append_chunk(con, "live1", Chunk("output.log", more.committed - 3, b"9.0\n"))


def test_a_step_file_waits_until_complete_and_a_filter_line_until_its_step(con):
    flt = b'{"workload_step": 0, "prompt_count": 2, "kept_prompt_indices": [1], "used_prompt_indices": [1]}\n'
    held = append_chunk(con, "live2", Chunk(FILTER, 0, flt, format="polytrace-filter"), name="r")
    assert held.committed == 0  # step 0 has no packed lengths yet
    partial = append_chunk(con, "live2", Chunk("packed_lengths_step_0.jsonl", 0, PACKED, format="polytrace-packed"))
    assert partial.committed == 0  # not complete: a step file is taken whole
    whole = append_chunk(con, "live2", Chunk("packed_lengths_step_0.jsonl", 0, PACKED, complete=True, mtime=1.0))
    assert (whole.committed, whole.steps, whole.rows) == (len(PACKED), [0], 4)
    flagged = append_chunk(con, "live2", Chunk(FILTER, 0, flt))
    assert flagged.committed == len(flt)
    assert con.execute("SELECT prompt_id, kept FROM samples WHERE run_id = 'live2' ORDER BY ALL").fetchall() == [
        (0, False), (0, False), (1, True), (1, True)]
    assert con.execute("SELECT steps, n FROM step_lengths WHERE run_id = 'live2'".replace("steps, ", "step, ")
                       ).fetchall() == [(0, 4)]
    # the packed file written again (a new mtime): its step reloads, and keeps the filter's flags,
    # whose line was taken already (a batch ingest of the same files applies them last)
    again = append_chunk(con, "live2", Chunk("packed_lengths_step_0.jsonl", 0, PACKED, complete=True, mtime=2.0))
    assert again.steps == [0] and "were reloaded" in again.notes[0]
    assert con.execute("SELECT prompt_id, kept, used FROM samples WHERE run_id = 'live2' ORDER BY ALL").fetchall() == [
        (0, False, False), (0, False, False), (1, True, True), (1, True, True)]


def test_a_rotated_log_is_said_once_and_followed_from_its_first_byte(tmp_path):

    root = tmp_path / "job"
    root.mkdir()
    con = store.open(tmp_path / "db.duckdb")
    said: list[str] = []
    f = follower(root, sinks_into(con), settle_s=0, say=said.append)
    (root / "output.log").write_bytes(b"step:1 - a:1\nstep:2 - a:2\n")
    assert f.tick() == [1, 2]
    (root / "output.log").rename(root / "old.log.1")
    (root / "output.log").write_bytes(b"step:3 - a:33\n")
    assert f.tick() == [1, 2, 3]  # old.log.1 is a file of its own now: its steps load again, unchanged
    (root / "output.log").write_bytes(b"step:4 - a:4\n")  # truncated in place, below the offset
    assert f.tick() == [4]
    assert f.tick() == []
    assert said == [
        "output.log was replaced (rotated): following the new file from its first byte",
        "output.log shrank below the 14 bytes already loaded (truncated): following it again from its first byte",
    ]
    rid = live_run_id(root)
    assert con.execute("SELECT DISTINCT step FROM step_metrics WHERE run_id = ? ORDER BY 1", [rid]).fetchall() == [
        (1,), (2,), (3,), (4,)]
    con.close()


def test_a_pusher_with_no_server_to_push_to_fails(watched):
    """A --server that is no address is refused in one line; one that cannot be reached is said,
    and `--once` (the job is over) exits non-zero: nothing was pushed."""
    (watched / "output.log").write_text("step:1 - a:1\n")

    def push(server: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "polytrace", "watch", str(watched), "--server", server, "--once"],
                              check=False, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)

    bad = push("notaurl")
    assert (bad.returncode, bad.stderr) == (
        2, "error: --server 'notaurl': expected the server's address as http://HOST:PORT\n")
    away = push("http://127.0.0.1:1")
    assert away.returncode == 1 and "cannot reach http://127.0.0.1:1" in away.stderr, away.stderr
    assert "Traceback" not in away.stderr


def test_a_pusher_resumes_from_what_the_server_committed_and_etags_follow_writes(make_server, watched, tmp_path):
    """`polytrace watch DIR --server URL --token T` twice over a growing directory: the second
    push resumes from the server's offsets; the run equals a batch ingest. Appends need the token,
    a gap is a 409 naming the offset, and a run's ETag changes with its own writes only."""
    srv = make_server(token="s3cret")
    other = httpx.post(f"{srv.url}/api/runs", files=[("file", ("p.jsonl", PACKED))],
                       headers={"Authorization": "Bearer s3cret"}).json()["run_id"]
    tag = httpx.get(f"{srv.url}/api/runs/{other}").headers["ETag"]
    units = plan(SHARED_DATA, log_steps=8)

    def push() -> None:
        done = subprocess.run([sys.executable, "-m", "polytrace", "watch", str(watched), "--server", srv.url,
                               "--token", "s3cret", "--once"], check=False, cwd=ROOT, capture_output=True, text=True,
                              timeout=WAIT_S)
        assert done.returncode == 0, done.stderr

    for unit in units[:6]:
        play(unit, watched, 0)
    push()
    run_id = live_run_id(watched)
    first = httpx.get(f"{srv.url}/api/runs/{run_id}/live").json()
    for unit in units[6:]:
        play(unit, watched, 0)
    push()
    status = httpx.get(f"{srv.url}/api/runs/{run_id}/live").json()
    assert {n: f["committed"] for n, f in status["files"].items()} == {p.name: p.stat().st_size
                                                                       for p in watched.iterdir()}
    assert status["last_step"] > first["last_step"]
    queries = per_run_queries()
    batch = batch_answers(watched, str(watched), watched.name, queries)
    assert differences(overview_caught_up(srv.url, run_id, queries, batch), batch) == []
    # appends are writes: the token; a gap names where to resend from
    url = f"{srv.url}/api/runs/{run_id}/append"
    assert httpx.post(url, params={"file": "output.log", "offset": 0}, content=b"step:1 - a:1\n").status_code == 401
    gap = httpx.post(url, params={"file": "output.log", "offset": 10**9}, content=b"step:99 - a:1\n",
                     headers={"Authorization": "Bearer s3cret"})
    assert gap.status_code == 409
    assert gap.json() == {"ok": False, "status": 409, "offset": status["files"]["output.log"]["committed"],
                          "error": f"output.log: bytes from {status['files']['output.log']['committed']} are "
                                   f"missing (resend from byte {status['files']['output.log']['committed']})"}
    # conditional GETs: 304 while nothing changed; the other run kept its ETag through the appends
    live_tag = httpx.get(f"{srv.url}/api/runs/{run_id}").headers["ETag"]
    for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/findings", f"/api/runs/{run_id}/live",
                 f"/api/queries/health_kl?run_id={run_id}"):
        etag = httpx.get(srv.url + path).headers["ETag"]
        assert httpx.get(srv.url + path, headers={"If-None-Match": etag}).status_code == 304, path
    assert httpx.get(f"{srv.url}/api/runs/{other}", headers={"If-None-Match": tag}).status_code == 304
    runs_tag = httpx.get(f"{srv.url}/api/runs").headers["ETag"]
    # a poll that names the current ETag and may wait is held until the next write, and answers it
    live_url = f"{srv.url}/api/runs/{run_id}/live"
    live_tag_now = httpx.get(live_url).headers["ETag"]
    assert httpx.get(live_url, params={"wait": 11}, headers={"If-None-Match": live_tag_now}).status_code == 422
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(httpx.get, live_url, params={"wait": 10}, headers={"If-None-Match": live_tag_now},
                           timeout=30)
        time.sleep(0.5)  # the poll is at the server, waiting
        appended = httpx.post(url, params={"file": "output.log",
                                           "offset": status["files"]["output.log"]["committed"]},
                              content=b"step:30 - timing_s/step:5.0\n", headers={"Authorization": "Bearer s3cret"})
        answer = held.result()
    assert appended.json()["steps"] == [30]
    assert answer.status_code == 200 and answer.json()["last_step"] == 30
    assert httpx.get(f"{srv.url}/api/runs/{run_id}", headers={"If-None-Match": live_tag}).status_code == 200
    assert httpx.get(f"{srv.url}/api/runs", headers={"If-None-Match": runs_tag}).status_code == 200
    assert httpx.get(f"{srv.url}/api/runs/{other}", headers={"If-None-Match": tag}).status_code == 304

# --- the dashboard: an open run page follows the run -------------------------------------------------

@pytest.mark.browser
def test_an_open_run_page_shows_new_steps_and_the_collapse_without_a_reload(page, watched, tmp_path):
    units = plan(SHARED_DATA, log_steps=20)
    log_units = [u for u in units if u[0][0] == "output.log"]  # the log alone: its collapse
    for unit in log_units[:7]:  # the preamble and steps 0-5
        play(unit, watched, 0)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(tmp_path / "page.duckdb", watched, port)
    run_id = live_run_id(watched)
    pg = page
    try:
        up(url, server)
        caught_up(url, run_id, watched)
        open_page(pg, f"{url}/runs/{run_id}")
        pg.wait_for_selector("#live-badge[data-live='1']")
        pg.evaluate("() => { window.sameDocument = true; }")
        chart = pg.evaluate("() => PolyCharts.entries.find(e => e.info.linked && e.info.name.startsWith('health_')).info.name")
        # the charts in view follow the run (the others catch up when they come into view)
        pg.evaluate("name => document.getElementById('chart-' + name).scrollIntoView()", chart)
        assert last_step_drawn(pg, chart) == 5
        assert pg.locator("li.finding[data-kind='collapse']").count() == 0
        for step, unit in enumerate(log_units[7:], start=6):
            zoomed = step == 8  # a step range the user chose stays while new steps land
            if zoomed:
                pg.evaluate("() => PolyCharts.setRange(2, 6)")
                refreshed = pg.get_attribute("#live-badge", "data-refreshed")
            play(unit, watched, 0.01)
            if zoomed:
                pg.wait_for_function(f"() => document.getElementById('live-badge').dataset.refreshed !== '{refreshed}'")
                assert pg.get_attribute("#range-bar", "data-range") == "2-6"
                assert pg.evaluate(f"() => document.getElementById('chart-{chart}').layout.xaxis.range") == [1.5, 6.5]
                pg.evaluate("() => PolyCharts.setRange(null, null)")
            pg.wait_for_function(f"() => ({LAST_STEP_JS})('{chart}') === {step}", timeout=20_000)
        # the log collapses around its step 12: the finding shows up, announced at the top of the page
        pg.wait_for_selector("li.finding[data-kind='collapse']", timeout=20_000)
        alert = pg.locator(".live-alert[data-kind='collapse']")
        assert "New critical finding" in alert.inner_text()
        assert pg.locator("li.finding").first.get_attribute("data-kind") == "collapse"
        assert pg.locator("#live-badge").inner_text().startswith("● live · last step 19")
        assert pg.evaluate("() => window.sameDocument") is True  # no reload
        screenshot(pg, "run-live-collapse.png")
        assert console_errors(pg) == []
    finally:
        stop(server)


# The last step a chart draws (its data, not the findings marked on it).
LAST_STEP_JS = """name => Math.max(...document.getElementById('chart-' + name).data
    .filter(t => !(t.meta && t.meta.finding)).flatMap(t => t.x || []).filter(Number.isFinite))"""


def last_step_drawn(pg, chart: str) -> int:
    return pg.evaluate(f"({LAST_STEP_JS})('{chart}')")


@contextmanager
def followed_page(pg, root: Path, db: Path, units: list) -> Iterator[tuple[str, str]]:
    """The run page, open in `pg`, of a run that `serve --watch` follows from `root` once `units` are
    written there: the server's URL and the run's id."""
    for unit in units:
        play(unit, root, 0)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(db, root, port)
    run_id = live_run_id(root)
    try:
        up(url, server)
        caught_up(url, run_id, root)
        open_page(pg, f"{url}/runs/{run_id}")
        pg.wait_for_selector("#live-badge[data-live='1']")
        yield url, run_id
    finally:
        stop(server)


# A part of the run page (by id) as the server renders it: what a reload shows before live.js runs.
SERVED_JS = """async ([url, id]) => new DOMParser()
    .parseFromString(await (await fetch(url)).text(), "text/html").getElementById(id).innerHTML"""
# The findings list as the page shows it, but for the outline live.js puts on the findings it announced.
SHOWN_FINDINGS_JS = """() => { const list = document.getElementById("findings-list").cloneNode(true);
    list.querySelectorAll(".finding-new").forEach(li => li.classList.remove("finding-new"));
    return list.innerHTML; }"""


def served(pg, url: str, part: str) -> str:
    return pg.evaluate(SERVED_JS, [url, part])


@pytest.mark.browser
def test_the_run_pages_header_counts_the_steps_that_land(page, watched, tmp_path):
    units = plan(SHARED_DATA, log_steps=20)
    with followed_page(page, watched, tmp_path / "page.duckdb", units[:3]) as (url, run_id):  # log steps 0-1
        facts = page.locator("#run-facts")
        assert re.search(r"\b2 steps\b", facts.inner_text()) and "samples" not in facts.inner_text()
        for unit in units[3:8]:  # packed step 0, its filter line, log steps 2-4
            play(unit, watched, 0.01)
        page.wait_for_function(r"() => /\b5 steps\b/.test(document.getElementById('run-facts').textContent)")
        caught_up(url, run_id, watched)
        want = served(page, f"{url}/runs/{run_id}", "run-facts")
        page.wait_for_function("want => document.getElementById('run-facts').innerHTML === want", arg=want)
        assert "768 samples" in facts.inner_text() and "polytrace-packed" in facts.inner_text()
        # the run's overview line may still be refreshed after the last append (a new ETag):
        # once it settles, the parts answer 304 to their own ETag
        for _ in range(50):
            tag = httpx.get(f"{url}/runs/{run_id}/live-parts").headers["ETag"]
            if httpx.get(f"{url}/runs/{run_id}/live-parts", headers={"If-None-Match": tag}).status_code == 304:
                break
        else:
            pytest.fail("the live parts never answered 304 to their own ETag")
        assert console_errors(page) == []


@pytest.mark.browser
def test_findings_redrawn_while_the_run_trains_are_the_servers_list(page, watched, tmp_path):
    units = plan(SHARED_DATA, log_steps=20)
    with followed_page(page, watched, tmp_path / "page.duckdb", units[:3]) as (url, run_id):
        # steps land until the lengths have grown over enough steps (a drift needs 5) ...
        alert = page.locator(".live-alert[data-kind='length_drift']")
        rest = iter(units[3:])
        for unit in rest:
            play(unit, watched, 0)
            try:
                alert.wait_for(timeout=3000)
                break
            except Exception:  # playwright's TimeoutError: not yet
                continue
        first = alert.inner_text()
        for unit in rest:  # then the responses collapse: the lengths fell
            play(unit, watched, 0.01)
        caught_up(url, run_id, watched)
        want = served(page, f"{url}/runs/{run_id}", "findings-list")
        page.wait_for_function(f"want => ({SHOWN_FINDINGS_JS})() === want", arg=want)
        evidence = page.get_attribute("li.finding[data-kind='collapse'] a.evidence", "href")
        assert evidence.startswith("/queries/metric?")  # the query's page, as the server links it
        # an announcement says its finding as the list says it now
        drift = page.locator("li.finding[data-kind='length_drift'] .text").inner_text()
        assert alert.inner_text() == f"New warn finding while the run trains: {drift}" != first
        screenshot(page, "run-live-findings.png")
        # a step button of the swapped-in list shows its steps on every step chart
        zoom = page.locator("li.finding[data-kind='collapse'] button.zoom")
        zoom.click()
        steps = f"{zoom.get_attribute('data-from')}-{zoom.get_attribute('data-to')}"
        page.wait_for_selector(f"#range-bar[data-range='{steps}']")
        assert console_errors(page) == []


@pytest.mark.browser
def test_charts_that_get_data_while_the_run_trains_are_added_without_a_reload(page, watched, tmp_path):
    units = plan(SHARED_DATA, log_steps=20)
    # log steps 0-1 and packed step 0, no filter line yet
    with followed_page(page, watched, tmp_path / "page.duckdb", units[:4]) as (url, run_id):
        assert page.locator("#chart-filter_waste").count() == 0
        page.evaluate("() => { window.sameDocument = true; }")
        for unit in units[4:9]:  # the filter's first line, log steps 2-4, packed step 1
            play(unit, watched, 0.01)
        # the card comes in its section, drawn from the rows REST gives, on the same document
        page.wait_for_selector("#chart-filter_waste[data-rendered] .main-svg", timeout=30_000)
        assert page.evaluate("() => window.sameDocument") is True
        card = page.locator(".chart-card[data-query='filter_waste']")
        assert card.locator(".gtitle").text_content() == "Generated tokens: trained on vs filtered away"
        section = card.locator("xpath=ancestor::section[1]").get_attribute("data-section")
        assert page.locator(f"nav.toc a[href='#{card.locator('xpath=ancestor::section[1]').get_attribute('id')}']").inner_text() == section
        assert page.evaluate("() => PolyCharts.entries.filter(e => e.info.name === 'filter_waste').length") == 1
        assert page.locator(".live-charts").count() == 0
        assert console_errors(page) == []


@pytest.mark.parametrize("fmt", ["verl-console", "verl-jsonl"])
def test_a_log_appended_a_line_at_a_time_equals_its_batch_parse(tmp_path, fmt):
    """Each line format's sample, sent in pieces that cut lines anywhere, lands as its batch ingest."""
    from polytrace.ingest import registry

    sample = registry.get(fmt).sample()
    (name, data), = sample.files.items()
    con = store.open(":memory:")
    committed = 0
    for cut in range(7, len(data) + 7, 7):  # seven bytes at a time: most pieces end inside a line
        committed = append_chunk(con, "live", Chunk(name, committed, data[committed:cut], format=fmt),
                                 name=name).committed
    (tmp_path / name).write_bytes(data)
    rid = ingest_paths(con, [tmp_path / name], name=name, names={tmp_path / name: name}).run_id
    assert committed == len(data)
    assert same(state(con, "live"), state(con, rid))
    con.close()


def _job(tmp_path, settle_s: float):
    """An empty job folder, a follower of it into a fresh in-memory database, and what it says."""
    root = tmp_path / "job"
    root.mkdir()
    con = store.open(":memory:")
    said: list[str] = []
    return root, con, said, follower(root, sinks_into(con), settle_s=settle_s, say=said.append)


def test_a_file_that_stops_parsing_is_said_once_and_the_run_keeps_updating(tmp_path):
    root, con, said, f = _job(tmp_path, settle_s=0)
    (root / "output.log").write_bytes(b"step:1 - a:1\n")
    (root / "packed_lengths_step_1.jsonl").write_bytes(b'{"step": 1, "input": 10, "output": [1, "x"]}\n')
    assert f.tick() == [1]
    with open(root / "output.log", "ab") as log:
        for step in (2, 3):
            log.write(b"step:%d - a:%d\n" % (step, step))
            log.flush()
            assert f.tick() == [step]
    assert len(said) == 1 and said[0].startswith("packed_lengths_step_1.jsonl: ") and "until it changes" in said[0]
    (root / "packed_lengths_step_1.jsonl").write_bytes(PACKED.replace(b'"step": 0', b'"step": 1'))
    assert f.tick() == [1]  # mended: taken
    assert con.execute("SELECT count(*) FROM samples").fetchone() == (4,)
    con.close()


def test_a_step_file_is_complete_once_the_next_steps_file_appears(tmp_path):

    root = tmp_path / "job"
    root.mkdir()
    con = store.open(":memory:")
    f = follower(root, sinks_into(con), settle_s=3600, say=print)
    step = [PACKED.replace(b'"step": 0', b'"step": %d' % k) for k in range(3)]
    (root / "packed_lengths_step_0.jsonl").write_bytes(step[0])
    assert f.tick() == []  # still the newest step file, and not settled
    (root / "packed_lengths_step_1.jsonl").write_bytes(step[1])
    assert f.tick() == [0]
    (root / "packed_lengths_step_2.jsonl").write_bytes(step[2])
    assert f.tick() == [1]
    con.close()


def test_following_says_which_steps_each_round_appended(tmp_path):
    root, con, said, f = _job(tmp_path, settle_s=3600)
    for k in (0, 1, 2):
        (root / f"packed_lengths_step_{k}.jsonl").write_bytes(PACKED.replace(b'"step": 0', b'"step": %d' % k))
    follow([f], threading.Event(), once=True, say=said.append)  # the job is running: step 2 may grow
    assert said == [f"{root}: steps 0–1 appended"]
    assert [step_span(s) for s in ([7], [3, 5, 4], [2, 9, 4, 5], [1, 3, 5, 7])] == \
        ["step 7", "steps 3–5", "steps 2, 4–5 and 9", "4 steps from 1 to 7"]
    con.close()


def _cut_short(step: int) -> bytes:
    """A verl step line W&B's console capture cut at its 4,096 characters, with its newline."""
    line = f"step:{step} - " + " - ".join(f"val-core/k{i}:0.123456" for i in range(400))
    return line[:4096].encode() + b"\n"


def test_every_cut_short_line_of_a_followed_log_is_warned_and_kept_in_its_ingest_record(tmp_path):
    root, con, said, f = _job(tmp_path, settle_s=0)
    with open(root / "output.log", "ab") as log:
        log.write(b"step:1 - a:1\n" + _cut_short(2))
        log.flush()
        assert f.tick() == [1, 2]
        log.write(b"step:3 - a:3\n" + _cut_short(4))
        log.flush()
        assert f.tick() == [3, 4]
    cut = "1 step line(s) cut short, their unfinished last pair dropped and log/truncated=1 set: step(s) {}"
    # said as `polytrace ingest` says a warning, once per append that had it
    assert said == [f"warning: output.log: {cut.format(2)}", f"warning: output.log: {cut.format(4)}"]
    # the record keeps both, under warnings; a loaded file has no error
    assert con.execute("SELECT status, error, warnings FROM ingests").fetchall() == [
        ("ok", None, f"{cut.format(2)}; {cut.format(4)}")]
    con.close()


def test_a_followed_files_warnings_are_capped_with_a_count_of_the_rest():
    from polytrace.ingest.append import MAX_WARNINGS, _said_so_far

    said = None
    for k in range(MAX_WARNINGS + 3):
        said = _said_so_far(said, [f"w{k}", "w0"])  # a repeated warning is kept once
    parts = said.split("; ")
    assert parts[:MAX_WARNINGS] == [f"w{k}" for k in range(MAX_WARNINGS)]
    assert parts[MAX_WARNINGS:] == ["and 3 more warning(s)"]
    assert _said_so_far(said, ["another"]).endswith("and 4 more warning(s)")


def test_values_that_are_no_numbers_are_counted_in_the_append_and_its_record(tmp_path):
    root, con, said, f = _job(tmp_path, settle_s=0)
    (root / "output.log").write_bytes(b"step:1 - a:1 - b:oops\nstep:2 - a:2\n")
    assert f.tick() == [1, 2]
    with open(root / "output.log", "ab") as log:
        log.write(b"step:3 - a:[1, 2] - c:3\n")
    assert f.tick() == [3]
    first, second = ("1 value(s) that are not numbers skipped: step(s) 1, e.g. b",
                     "1 value(s) that are not numbers skipped: step(s) 3, e.g. a")
    assert said == [f"warning: output.log: {first}", f"warning: output.log: {second}"]
    assert con.execute("SELECT warnings FROM ingests").fetchall() == [(f"{first}; {second}",)]
    # the numbers of those lines are kept
    assert con.execute("SELECT step, key, value FROM step_metrics ORDER BY ALL").fetchall() == [
        (1, "a", 1.0), (2, "a", 2.0), (3, "c", 3.0)]
    con.close()

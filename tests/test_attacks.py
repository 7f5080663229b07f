"""The attack pass against `polytrace serve` (issue 15), each finding reproduced against a real
uvicorn server and a real DuckDB file, with the safe outcome it now has. Loopback only; every
loop is bounded in count and time."""
from __future__ import annotations

import gzip
import hashlib
import http.server
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from polytrace import store
from polytrace.ingest.load import ingest_paths
from polytrace.store.lake import export_runs
from tests.conftest import ROOT, free_port
from tests.test_api import PACKED, _clean_env, assert_error, extra_queries, table_counts, upload  # noqa: F401
from tests.test_browser import browser  # noqa: F401  (Chromium as the other browser tests launch it)
from tests.test_crash_safety import Server, parse_workers, upload_in_thread, wait_for, write_packed

VICTIM_DIGEST = hashlib.sha256(hashlib.sha256(PACKED).hexdigest().encode()).hexdigest()


def run_ids(srv) -> list[str]:
    return sorted(r["run_id"] for r in httpx.get(f"{srv.url}/api/runs").json()["runs"])


def clean_env(**extra: str) -> dict[str, str]:
    return {**_clean_env(), **extra}


# --- 1. dedup poisoning through an uploaded Parquet lake ----------------------------------------

def forged_lake(tmp_path: Path, run_id: str, sha256: str, lengths: list[int]) -> list[tuple[str, bytes]]:
    """A lake, as an attacker would upload it, whose one run claims `run_id` and digest `sha256`
    and holds samples of these response lengths."""
    folder = tmp_path / f"forge-{run_id}-{len(lengths)}"
    folder.mkdir()
    con = store.open(folder / "forge.duckdb")
    con.execute("INSERT INTO runs (run_id, name, format, sha256) VALUES (?, 'forged', 'polytrace-packed', ?)",
                [run_id, sha256])
    con.executemany("INSERT INTO samples (run_id, step, prompt_id, sample_id, dp_rank, prompt_len, response_len) "
                    "VALUES (?, 0, ?, 0, 0, 10, ?)", [[run_id, i, n] for i, n in enumerate(lengths)])
    export_runs(con, [run_id], folder / "lake")
    con.close()
    return [(p.relative_to(folder).as_posix(), p.read_bytes()) for p in sorted((folder / "lake").rglob("*.parquet"))]


def test_a_planted_digest_cannot_make_a_later_upload_existing(make_server, tmp_path):
    srv = make_server()
    lake = forged_lake(tmp_path, "fake01", VICTIM_DIGEST, [99_999] * 3)
    planted = upload(srv, lake)
    assert planted.status_code == 201, planted.text
    assert planted.json()["run_ids"] == ["fake01"]
    # the server's digest is of the bytes it received, not the one the runs row carried
    assert httpx.get(f"{srv.url}/api/runs/fake01").json()["run"]["sha256"] != VICTIM_DIGEST

    victim = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)])
    assert victim.status_code == 201, victim.text
    assert victim.json()["existing"] is False and victim.json()["rows"] == {"samples": 4}
    run_id = victim.json()["run_id"]
    # the digest the forged runs row claimed was the victim's indeed
    assert run_id != "fake01" and httpx.get(f"{srv.url}/api/runs/{run_id}").json()["run"]["sha256"] == VICTIM_DIGEST
    stats = httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id}).json()
    assert dict(zip(stats["columns"], stats["rows"][0]))["response_max"] == 7  # the victim's own rows

    # the same lake again is the same bytes: existing, nothing added
    before = table_counts(srv)
    again = upload(srv, lake)
    assert again.status_code == 200 and again.json()["existing"] is True
    assert table_counts(srv) == before


def test_a_lake_claiming_an_existing_run_id_is_409(make_server, tmp_path):
    srv = make_server()
    run_id = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    before = table_counts(srv)
    # old behaviour: the stored digest matched, so the upload came back `existing`
    claim = upload(srv, forged_lake(tmp_path, run_id, VICTIM_DIGEST, [99_999]))
    assert assert_error(claim, 409) == f"lake: run {run_id} already exists here with different content"
    assert table_counts(srv) == before
    assert httpx.get(f"{srv.url}/api/runs/{run_id}").json()["rows"] == {"samples": 4}


@pytest.mark.parametrize("bad_id", ["<b>x</b>", "🔥run", "..", "a" * 65])
def test_a_lake_run_id_outside_the_pattern_is_refused(make_server, tmp_path, bad_id):
    srv = make_server()
    assert upload(srv, [("keep.jsonl", PACKED)]).status_code == 201
    before = table_counts(srv)
    files = [(name.replace("run_id=ok01", f"run_id={bad_id}"), data)
             for name, data in forged_lake(tmp_path, "ok01", "0" * 64, [5])]
    error = assert_error(upload(srv, files), 400)
    if "/" not in bad_id:  # else the name splits into two folders: a partition without a file
        assert "is not a valid run id" in error
    assert table_counts(srv) == before


def test_downloads_are_named_safely_whatever_the_run_id_or_query_name(make_server, tmp_path, monkeypatch):
    """A database from before run ids were checked may hold any id; a site's query file any name."""
    from tests.test_kineto import RANK0, trace_doc, write_json

    weird = '<b onmouseover="x">🔥</b>'
    trace = write_json(tmp_path / "rank0.json", trace_doc(0, [(1, 0, 10000)], RANK0))
    con = store.open(tmp_path / "server.duckdb")
    old = ingest_paths(con, [trace]).run_id
    for (table,) in con.execute("SELECT table_name FROM duckdb_columns() WHERE column_name = 'run_id' "
                                "AND table_name IN (SELECT table_name FROM duckdb_tables())").fetchall():
        con.execute(f'UPDATE "{table}" SET run_id = ? WHERE run_id = ?', [weird, old])
    con.close()
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "übersicht.sql").write_text("-- title: Overview\n-- Test fixture: one row.\n"
                                          "-- @column n INTEGER  One.\nSELECT 1 AS n\n")
    monkeypatch.setenv("POLYTRACE_EXTRA_QUERIES", str(folder))
    srv = make_server()
    r = httpx.get(f"{srv.url}/ui/perfetto", params={"run_id": weird, "rank": 0, "step": 1})
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"] == (
        'attachment; filename="polytrace-_b_onmouseover__x_____b_-rank0-step1.json"; '
        "filename*=UTF-8''polytrace-%3Cb%20onmouseover%3D%22x%22%3E%F0%9F%94%A5%3C%2Fb%3E-rank0-step1.json")
    for fmt in ("csv", "parquet"):
        r = httpx.get(f"{srv.url}/api/queries/übersicht", params={"format": fmt})
        assert r.status_code == 200, r.text
        assert r.headers["content-disposition"] == (
            f"attachment; filename=\"_bersicht.{fmt}\"; filename*=UTF-8''%C3%BCbersicht.{fmt}")
    # ids that cannot be run ids are refused where they come in
    assert_error(httpx.get(f"{srv.url}/api/runs/🔥<b>"), 422, "'run_id'")
    assert_error(httpx.delete(f"{srv.url}/api/runs/🔥<b>"), 422, "'run_id'")


# --- 2. gzip bomb: memory ------------------------------------------------------------------------

BOMB_INFLATED = 2 * 1024**3
RSS_BOUND = 1024**3
# Past this the server is killed, to spare a shared machine; the test then fails on RSS_BOUND.
RSS_CEILING = 3 * 1024**3


def verl_bomb(path: Path) -> Path:
    """A .gz verl console log of BOMB_INFLATED bytes: gzip members of 16 MiB of log lines, each
    re-logging step 1 amid noise, so that what it holds is one step."""
    block = bytearray(b"step:1 - timing_s/gen:6.0 - timing_s/step:10.0\n")
    noise = b"(TaskRunner pid=4242) INFO worker.py:88 -- waiting for rollout workers to report\n"
    block += noise * ((16 * 1024**2 - len(block)) // len(noise))
    member = gzip.compress(bytes(block), compresslevel=9)
    path.write_bytes(member * (BOMB_INFLATED // len(block)))
    return path


def tree_rss(pid: int) -> int:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


@pytest.fixture(scope="module")
def bomb_upload(tmp_path_factory):
    """Upload the bomb to a server in a subprocess while sampling its RSS (children included).
    Returns (the answer or None when the ceiling killed the server, the peak RSS)."""
    tmp = tmp_path_factory.mktemp("bomb")
    bomb = verl_bomb(tmp / "output.log.gz")
    srv = Server(tmp / "server.duckdb", free_port(), tmp)
    peak, done = [0], threading.Event()

    def sample() -> None:
        deadline = time.monotonic() + 600
        while not done.is_set() and time.monotonic() < deadline:
            peak[0] = max(peak[0], tree_rss(srv.proc.pid))
            if peak[0] > RSS_CEILING:
                srv.proc.kill()
                return
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        answer = httpx.post(f"{srv.url}/api/runs", files={"file": ("output.log.gz", bomb.read_bytes())},
                            timeout=600)
    except httpx.TransportError:
        answer = None
    finally:
        done.set()
        sampler.join(timeout=10)
        if srv.proc.poll() is None:
            srv.stop()
    print(f"gzip bomb ({bomb.stat().st_size} B inflating to {BOMB_INFLATED} B): "
          f"{answer.status_code if answer is not None else 'server killed'}, peak RSS {peak[0] / 1024**2:.0f} MiB")
    return answer, peak[0]


def test_gzip_bomb_upload_answers_cleanly(bomb_upload):
    answer, _ = bomb_upload
    assert answer is not None, "the server passed RSS_CEILING and was killed"
    assert answer.status_code == 201 or (400 <= answer.status_code < 500 and answer.json()["ok"] is False)
    if answer.status_code == 201:  # 2 GB of lines that hold one step: its generation and step times
        assert answer.json()["rows"] == {"step_metrics": 2}


def test_gzip_bomb_upload_keeps_server_memory_bounded(bomb_upload):
    _, peak = bomb_upload
    assert peak < RSS_BOUND, f"server RSS reached {peak / 1024**2:.0f} MiB"


# --- 3. CSRF from another loopback origin, DNS rebinding ----------------------------------------

ATTACK_PAGE = """<!doctype html><title>cat pictures</title>
<iframe name="sink"></iframe>
<form id="form" method="POST" action="{server}/api/runs" enctype="multipart/form-data" target="sink">
  <input type="hidden" name="name" value="planted by a form"></form>
<script>
(async () => {{
  const out = [];
  const fd = new FormData();
  fd.append("file", new Blob([{packed!r}]), "packed_lengths_step_0.jsonl");
  fd.append("name", "planted");
  try {{ await fetch("{server}/api/runs", {{method: "POST", mode: "no-cors", body: fd}}); out.push("post sent"); }}
  catch (e) {{ out.push("post refused by the browser"); }}
  for (const mode of ["no-cors", "cors"]) {{
    try {{ await fetch("{server}/api/runs/{victim}", {{method: "DELETE", mode}}); out.push(mode + " delete sent"); }}
    catch (e) {{ out.push(mode + " delete refused by the browser"); }}
  }}
  document.getElementById("form").submit();
  window.done = out;
}})();
</script>"""


def serve_page(host: str, html: str) -> tuple[http.server.HTTPServer, str]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer((host, 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://{host}:{httpd.server_address[1]}/attack.html"


@pytest.mark.browser
@pytest.mark.parametrize("attacker_host", ["127.0.0.2", "127.0.0.1"], ids=["cross-site", "same-site other port"])
def test_a_page_on_another_loopback_origin_cannot_upload_or_delete(make_server, browser, attacker_host):  # noqa: F811
    srv = make_server()
    victim = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    before = table_counts(srv)
    page_html = ATTACK_PAGE.format(server=srv.url, victim=victim, packed=PACKED.replace(b"10", b"13").decode())
    httpd, page_url = serve_page(attacker_host, page_html)
    seen: list[tuple[str, str, int]] = []
    try:
        page = browser.new_page()
        page.on("response", lambda r: seen.append((r.request.method, r.url, r.status))
                if r.url.startswith(srv.url) else None)
        page.goto(page_url)
        page.wait_for_function("window.done !== undefined", timeout=15_000)
        outcome = page.evaluate("window.done")
        for _ in range(200):  # the form's POST into the iframe: at most 10 s
            if sum(method == "POST" for method, _, _ in seen) == 2:
                break
            page.wait_for_timeout(50)
        page.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert run_ids(srv) == [victim] and table_counts(srv) == before
    # the POSTs reached the server and were refused there; the DELETEs never left the browser
    assert outcome == ["post sent", "no-cors delete refused by the browser", "cors delete refused by the browser"]
    assert [(m, status) for m, _, status in seen] == [("POST", 403), ("POST", 403)]


def test_a_delete_naming_a_rebound_host_is_refused(make_server):
    srv = make_server()
    victim = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    r = httpx.delete(f"{srv.url}/api/runs/{victim}", headers={"Host": "rebind.attacker.example"})
    assert_error(r, 400, "'rebind.attacker.example' is not one this server answers to")
    assert run_ids(srv) == [victim]


# --- 4. kill -9 mid-ingest: no orphaned parse worker holds the port -------------------------------

def test_a_server_killed_mid_ingest_restarts_on_its_port_within_10_s(tmp_path, uploads_dir):
    uploads = uploads_dir
    ranks = [write_packed(tmp_path / f"packed_lengths_step_{i}.jsonl", 2, 50_000, seed=20 + i).path
             for i in range(2)]  # 2 x 18 MB: parsed by workers
    db, port = tmp_path / "server.duckdb", free_port()
    srv = Server(db, port, uploads, env={"POLYTRACE_PARSE_JOBS": "2"})
    try:
        thread = upload_in_thread(srv.url, ranks, pause_every=None)
        wait_for(lambda: parse_workers(srv.proc.pid), "parse workers to start")
    finally:
        srv.kill()
    thread.join(timeout=30)
    assert list(uploads.glob("polytrace-upload-*")), "the killed upload left no folder to clean"

    env = clean_env(TMPDIR=str(uploads))
    restarted = subprocess.Popen([sys.executable, "-m", "polytrace", "serve", "--db", str(db), "--port", str(port)],
                                 cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, answered = time.monotonic() + 10, False
        while not answered and time.monotonic() < deadline and restarted.poll() is None:
            try:
                answered = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200
            except httpx.TransportError:
                time.sleep(0.05)
        assert answered, f"no answer on port {port} within 10 s (exit {restarted.poll()})"
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs").json()["runs"] == []
        # 12: the killed upload's temporary folder went at the start
        assert not list(uploads.glob("polytrace-upload-*"))
    finally:
        restarted.terminate()
        restarted.wait(timeout=30)
        restarted.stderr.close()


# --- 5. silent file loss, folder names ----------------------------------------------------------

def test_two_parts_with_one_path_are_422_naming_it(make_server):
    srv = make_server()
    same = [("run/packed_lengths_step_0.jsonl", PACKED), ("run/packed_lengths_step_0.jsonl", PACKED[:80] + b"\n")]
    assert_error(upload(srv, same), 422, "two files are named 'run/packed_lengths_step_0.jsonl'")
    clash = [("run/a", PACKED), ("run/a/packed_lengths_step_0.jsonl", PACKED)]
    assert_error(upload(srv, clash), 422, "'run/a/packed_lengths_step_0.jsonl' names both a file and a folder")
    assert table_counts(srv)["runs"] == 0


def test_a_dropped_folder_names_the_run(make_server):
    srv = make_server()
    two = [("dapo-0614/packed_lengths_step_0.jsonl", PACKED),
           ("dapo-0614/packed_lengths_step_1.jsonl", PACKED.replace(b'"step": 0', b'"step": 1'))]
    r = upload(srv, two)
    assert r.status_code == 201, r.text
    assert r.json()["rows"] == {"samples": 8}
    one = upload(srv, [("solo-run/packed_lengths_step_0.jsonl", PACKED)])
    assert one.status_code == 201, one.text
    names = {run["run_id"]: run["name"] for run in httpx.get(f"{srv.url}/api/runs").json()["runs"]}
    assert names == {r.json()["run_id"]: "dapo-0614", one.json()["run_id"]: "solo-run"}


# --- 6. DELETE takes the run's ingest log with it --------------------------------------------------

def test_delete_removes_the_runs_ingest_log(make_server):
    srv = make_server()
    run_id = upload(srv, [("secret-project/packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    assert_error(upload(srv, [("notes.txt", b"hello\n")]), 415)  # a failed attempt: logged without a run

    def log(cur):
        return cur.execute("SELECT run_id, file_name, status FROM ingests ORDER BY ingest_id").fetchall()

    assert [(r, s) for r, _, s in srv.app.state.db.read(log, 10_000, "ingests")] == [(run_id, "ok"), (None, "failed")]
    assert httpx.delete(f"{srv.url}/api/runs/{run_id}").status_code == 200
    assert srv.app.state.db.read(log, 10_000, "ingests") == [(None, "notes.txt", "failed")]


# --- 7. a slow query in Parquet or CSV is 504 ------------------------------------------------------

@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_slow_query_is_504_in_every_format(make_server, extra_queries, fmt):  # noqa: F811
    srv = make_server(query_timeout_ms=300)
    r = httpx.get(f"{srv.url}/api/queries/slow_cross_join", params={"run_id": "x", "format": fmt}, timeout=30)
    assert_error(r, 504, "slow_cross_join", "300 ms", "POLYTRACE_QUERY_TIMEOUT_MS")


# --- 8. disk full -----------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs; skipped where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30, check=False)


def fill(disk: Path, leave: int) -> Path:
    """Take the disk's free space down to about `leave` bytes with a filler file."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "ab", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, free - leave))
            f.flush()
            # with nothing to leave, take the last pages too: until a write fails (bounded)
            for _ in range(4096 if leave == 0 else 0):
                f.write(b"\0" * 4096)
                f.flush()
        except OSError:
            pass  # full
    return filler


def test_a_full_disk_is_507_and_the_database_takes_the_next_upload(make_server, small_disk, tmp_path):
    from tests.conftest import LiveServer

    srv = make_server(db=str(small_disk / "server.duckdb"))
    first = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    filler = fill(small_disk, leave=6 * 1024**2)
    big = write_packed(tmp_path / "packed_lengths_step_1.jsonl", 5, 50_000, seed=31).path  # about 9 MB in DuckDB
    before = table_counts(srv)
    error = assert_error(upload(srv, [("big.jsonl", big.read_bytes())]), 507, "No space left on device")
    assert "Current transaction is aborted" not in error
    assert table_counts(srv) == before

    second = upload(srv, [("packed_lengths_step_2.jsonl", PACKED.replace(b"10", b"11"))])
    assert second.status_code == 201, second.text
    # a delete on a full disk: DuckDB may find room for it in pages it holds already; when it
    # cannot, the answer is a 507 naming the cause and nothing is deleted
    fill(small_disk, leave=0)
    deleted = httpx.delete(f"{srv.url}/api/runs/{first}")
    if deleted.status_code != 200:
        assert_error(deleted, 507, "No space left on device")
        assert run_ids(srv) == sorted([first, second.json()["run_id"]])
        filler.unlink()
        assert httpx.delete(f"{srv.url}/api/runs/{first}").status_code == 200
    else:
        filler.unlink()
    assert run_ids(srv) == [second.json()["run_id"]]

    srv.__exit__(None, None, None)
    from polytrace.settings import Settings

    with LiveServer(Settings(db=str(small_disk / "server.duckdb"))) as again:
        assert run_ids(again) == [second.json()["run_id"]]
        assert upload(again, [("packed_lengths_step_3.jsonl", PACKED.replace(b"10", b"12"))]).status_code == 201


def test_a_server_starts_on_a_full_disk_and_says_which_answers_are_stale(small_disk, tmp_path):
    from polytrace.settings import Settings
    from tests.conftest import LiveServer
    from tests.goldens import load_case

    db = small_disk / "server.duckdb"
    load_case("findings", str(db)).close()
    con = store.open(db, "w")
    con.execute("UPDATE run_overview SET catalog = 'older' WHERE run_id = 'r1'")  # an older catalog's line
    con.close()
    filler = fill(small_disk, leave=0)
    with LiveServer(Settings(db=str(db))) as srv:
        health = httpx.get(f"{srv.url}/api/health").json()
        if health["stale"] is None:  # DuckDB found room in pages it holds: nothing to say
            pytest.skip("the refresh found room on the full disk")
        assert "summing them up again failed at start-up" in health["stale"]
        assert "No space left on device" in health["stale"]
        page = httpx.get(f"{srv.url}/")
        assert page.status_code == 200 and 'id="stale-note"' in page.text
        assert httpx.get(f"{srv.url}/api/runs/r1/findings").status_code == 200
    filler.unlink()
    with LiveServer(Settings(db=str(db))) as again:  # with room: summed up, nothing to say
        assert httpx.get(f"{again.url}/api/health").json()["stale"] is None


# --- 9, 10. bad values, deep names, catalog files that are not one SELECT --------------------------

@pytest.mark.parametrize("value", ["²", "99999999999", "0", "-1", "8.0", "٣"])
def test_a_run_fact_that_is_no_int32_is_422_naming_it(make_server, value):
    srv = make_server()
    assert_error(upload(srv, [("a.jsonl", PACKED)], n_gpus=value), 422, "'n_gpus'", "2147483647")
    assert table_counts(srv)["runs"] == 0


def test_a_file_in_1900_nested_folders_is_422(make_server):
    srv = make_server()
    deep = "a/" * 1900 + "packed_lengths_step_0.jsonl"
    assert_error(upload(srv, [(deep, PACKED)]), 422, "'file'", "nested in 1900 folders")
    assert table_counts(srv)["runs"] == 0


EXTRA_QUERY_HEADER = "-- title: Site query\n-- Test fixture: a site's own query.\n-- @column n INTEGER  One.\n"
REFUSED_QUERIES = {
    "untyped_param": (("-- title: Untyped\n-- Test fixture.\n-- @param run_id\n-- @column n INTEGER  One.\n"
                       "SELECT 1 AS n WHERE $run_id IS NOT NULL\n"), "`@param run_id`"),
    "commit_insert": (EXTRA_QUERY_HEADER + "SELECT 1 AS n; COMMIT; INSERT INTO runs (run_id) VALUES ('planted')\n",
                      "holds 3 SQL statements"),
    "memory_limit": (EXTRA_QUERY_HEADER + "SET memory_limit = '1MB'\n", "not SET"),
}


@pytest.mark.parametrize("name", list(REFUSED_QUERIES))
def test_serve_refuses_an_extra_query_that_is_not_one_select(tmp_path, name):
    sql, fragment = REFUSED_QUERIES[name]
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / f"{name}.sql").write_text(sql)
    db = tmp_path / "server.duckdb"
    out = subprocess.run([sys.executable, "-m", "polytrace", "serve", "--db", str(db), "--port", str(free_port())],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
                         env=clean_env(POLYTRACE_EXTRA_QUERIES=str(folder)))
    assert out.returncode == 2, out.stderr[-500:]
    assert out.stderr.startswith(f"error: {folder / name}.sql: ") and out.stderr.count("\n") == 1
    assert fragment in out.stderr
    if db.exists():
        con = store.open(db, "r")
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        con.close()


# --- 12. stale upload folders, slow bodies -----------------------------------------------------------

def test_start_removes_only_upload_folders_no_live_upload_holds(make_server, tmp_path, monkeypatch):
    import tempfile

    from polytrace.server.uploads import Upload

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / "polytrace-upload-killed"
    (stale / "files").mkdir(parents=True)
    (stale / "files" / "packed_lengths_step_0.jsonl").write_bytes(PACKED)
    live = Upload.new()
    try:
        make_server()
        assert not stale.exists() and live.root.is_dir()
    finally:
        live.discard()


def test_a_body_trickling_in_is_cut_off_with_408(make_server):
    srv = make_server(upload_timeout_s=1.5)
    boundary = b"polytraceboundary"
    head = (b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
            b"Content-Type: multipart/form-data; boundary=" + boundary + b"\r\n\r\n--" + boundary +
            b'\r\nContent-Disposition: form-data; name="file"; filename="packed_lengths_step_0.jsonl"\r\n\r\n')
    reply = b""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(head)
        for i in range(40):  # one byte every 0.25 s, for at most 10 s
            if select.select([s], [], [], 0.25)[0]:
                break
            try:
                s.sendall(PACKED[i:i + 1])
            except OSError:
                break
        while b"}" not in reply:
            got = s.recv(65536)
            if not got:
                break
            reply += got
    status, _, rest = reply.partition(b"\r\n")
    assert status == b"HTTP/1.1 408 Request Timeout", reply[:300]
    assert rest.split(b"\r\n\r\n", 1)[1] == (b'{"ok":false,"error":"the upload did not arrive within 1.5 s '
                                             b'(POLYTRACE_UPLOAD_TIMEOUT_S)","status":408}')
    assert table_counts(srv)["runs"] == 0


def test_ten_thousand_tiny_files_in_one_upload_cost_little_memory_each(tmp_path):
    """10,000 two-sample step files (1.5 MB of bytes) in one upload took 1.7 GB: DuckDB paid per
    Arrow batch it appended. The server's process tree stays within 12 KB a file of its idle size."""
    import psutil

    server = Server(tmp_path / "many.duckdb", free_port(), tmp_path)
    try:
        proc = psutil.Process(server.proc.pid)
        # one small upload first: what the first upload imports is not a per-file cost
        assert upload(server, [("packed_lengths_step_0.jsonl", PACKED)]).status_code == 201
        idle = proc.memory_info().rss
        files = [("file", (f"run/packed_lengths_step_{k}.jsonl",
                           b'{"step": %d, "rank": 0, "input": 10, "output": [5, 7]}\n' % k)) for k in range(10_000)]
        peak, done = [idle], threading.Event()

        def sample() -> None:
            while not done.is_set():
                try:
                    peak.append(sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
                except psutil.Error:
                    pass
                done.wait(0.02)

        watcher = threading.Thread(target=sample)
        watcher.start()
        try:
            answer = httpx.post(f"{server.url}/api/runs", files=files, timeout=300)
        finally:
            done.set()
            watcher.join()
        assert answer.status_code == 201, answer.text
        assert answer.json()["rows"] == {"samples": 20_000}
        grown = (max(peak) - idle) / 10_000
        print(f"\n10,000 files in one upload: {grown / 1024:.1f} KB a file over the idle server")
        # The regression this guards took 170 KB a file. The tree's parse workers come and go
        # during the upload: 9.1 KB alone and 10.3 KB in a CI run of the same code (2026-12-07).
        assert grown < 12 * 1024
    finally:
        server.stop()

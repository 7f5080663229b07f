"""The REST API over a real uvicorn server and a real DuckDB file: runs, uploads, limits, auth, errors."""
from __future__ import annotations

import gzip
import io
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import httpx
import pyarrow.parquet as pq
import pytest

from polytrace import store
from polytrace.ingest import load
from polytrace.ingest.load import ingest_paths
from polytrace.store.runs import data_tables

DAPO = "polytrace/verl/profile/packed_length_log/20260614_023133"
RLLM = "polytrace/rllm/profile/packed_length_log/20260616_024512"

# Two prompts of one step, 2 samples each: rows (10, 1), (10, 3), (20, 5), (20, 7).
PACKED = (
    b'{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3]}\n'
    b'{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [5, 7]}\n'
)
# Step 0 has 2 prompts x 2 samples, steps 1 and 2 one prompt each: 3 rows of length_stats.
THREE_STEPS = PACKED + (
    b'{"step": 1, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 4, "output": [2, 2]}\n'
    b'{"step": 2, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 4, "output": [9]}\n'
)
SLOW_SQL = """-- name: slow_cross_join
-- title: Deliberately slow
-- Test fixture: a 10^10-pair cross join that outlasts any small time limit.
-- @param run_id VARCHAR  Only bound, so the query looks like a dashboard query.
-- @column n BIGINT  Pairs counted.
SELECT count(*) AS n FROM range(100000) a, range(100000) b
WHERE a.range * 7 + b.range * 3 + length($run_id) < 0
"""
NAN_SQL = """-- name: non_finite
-- title: Non-finite floats
-- Test fixture: NaN and infinities, which JSON cannot carry as numbers.
-- @column nan DOUBLE  NaN.
-- @column pos_inf DOUBLE  +inf.
-- @column neg_inf DOUBLE  -inf.
-- @column finite DOUBLE  1.5.
SELECT 'nan'::DOUBLE AS nan, 'inf'::DOUBLE AS pos_inf, '-inf'::DOUBLE AS neg_inf, 1.5 AS finite
"""


def upload(srv, files, token=None, **data):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{srv.url}/api/runs", files=[("file", f) for f in files], data=data,
                      headers=headers, timeout=60)


def assert_error(response, status, *fragments):
    assert response.status_code == status, response.text
    body = response.json()
    assert body == {"ok": False, "error": body["error"], "status": status}
    assert "\n" not in body["error"]
    for fragment in fragments:
        assert fragment in body["error"]
    return body["error"]


def table_counts(srv) -> dict[str, int]:
    """Rows of every table, runs included, read through the server's own connection."""
    def count(cur):
        return {t: cur.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                for t in [*data_tables(cur), "runs"]}
    return srv.app.state.db.read(count, 10_000, "counts")


def failed_ingests(srv) -> list[tuple]:
    return srv.app.state.db.read(lambda cur: cur.execute(
        "SELECT file_name, error FROM ingests WHERE status = 'failed' ORDER BY ingest_id").fetchall(),
        10_000, "ingests")


@pytest.fixture
def extra_queries(tmp_path, monkeypatch):
    """Point the catalog at a directory holding the slow and the non-finite test queries."""
    folder = tmp_path / "extra_queries"
    folder.mkdir()
    (folder / "slow_cross_join.sql").write_text(SLOW_SQL)
    (folder / "non_finite.sql").write_text(NAN_SQL)
    monkeypatch.setenv("POLYTRACE_EXTRA_QUERIES", str(folder))
    return folder


# --- health, runs, errors -------------------------------------------------------------------

def test_health_and_empty_runs(make_server):
    srv = make_server()
    assert httpx.get(f"{srv.url}/api/health").json() == {
        "ok": True, "version": "0.1.0", "writes_need_token": False, "reads_need_token": False, "stale": None}
    assert httpx.get(f"{srv.url}/api/runs").json() == {"ok": True, "runs": []}


def test_one_error_shape_for_unknown_things(make_server):
    srv = make_server()
    assert_error(httpx.get(f"{srv.url}/api/nowhere"), 404, "Not Found")
    assert_error(httpx.put(f"{srv.url}/api/health"), 405, "Method Not Allowed")
    assert_error(httpx.get(f"{srv.url}/api/runs/nope"), 404, "unknown run 'nope'")
    assert_error(httpx.delete(f"{srv.url}/api/runs/nope"), 404, "unknown run 'nope'")
    assert_error(httpx.get(f"{srv.url}/api/queries/nope?run_id=x"), 404, "unknown query 'nope'")


def test_bad_query_parameters_are_422_naming_the_parameter(make_server):
    srv = make_server()
    url = f"{srv.url}/api/queries/length_stats"
    assert_error(httpx.get(url), 422, "'run_id'")
    assert_error(httpx.get(url, params={"run_id": "x", "bogus": "1"}), 422, "'bogus'")
    assert_error(httpx.get(url, params={"run_id": "x", "format": "xml"}), 422, "'format'")
    histogram = f"{srv.url}/api/queries/length_histogram"
    assert_error(httpx.get(histogram, params={"run_id": "x", "step_from": "abc"}), 422, "'step_from'")
    # INTEGER parameters stay in DuckDB's INTEGER range
    assert_error(httpx.get(histogram, params={"run_id": "x", "step_to": 2**31}), 422, "'step_to'")
    # in range, the parameters pass; the run they name is not here: a 404, not an empty answer
    assert_error(httpx.get(histogram, params={"run_id": "x", "step_from": 0, "step_to": 2**31 - 1}), 404,
                 "unknown run 'x'")
    assert_error(httpx.get(histogram, params={"run_id": "x", "format": "csv"}), 404, "unknown run 'x'")
    # a GPU count is at least 1 (`@param gpus INTEGER = NULL >= 1`): -1 GPUs flipped the policies' order
    savings = f"{srv.url}/api/queries/whatif_savings"
    for gpus in (-1, 0):
        assert_error(httpx.get(savings, params={"run_id": "x", "gpus": gpus}), 422,
                     f"parameter 'gpus' must be at least 1, got {gpus}")
    assert_error(httpx.get(savings, params={"run_id": "x", "gpus": 1}), 404, "unknown run 'x'")
    documented = httpx.get(f"{srv.url}/openapi.json").json()["paths"]["/api/queries/whatif_savings"]["get"]
    assert next(p for p in documented["parameters"] if p["name"] == "gpus")["schema"]["anyOf"][0]["minimum"] == 1


def test_upload_get_list_delete_a_run(make_server, tmp_path):
    srv = make_server()
    r = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)])
    assert r.status_code == 201, r.text
    body = r.json()
    run_id = body["run_id"]
    assert body == {"ok": True, "run_id": run_id, "run_ids": [run_id], "format": "polytrace-packed",
                    "rows": {"samples": 4}, "existing": False, "warnings": []}
    runs = httpx.get(f"{srv.url}/api/runs").json()["runs"]
    assert [(r["run_id"], r["name"], r["samples"]) for r in runs] == [
        (run_id, "packed_lengths_step_0.jsonl", 4)]
    detail = httpx.get(f"{srv.url}/api/runs/{run_id}").json()
    assert detail["run"]["run_id"] == run_id and detail["run"]["format"] == "polytrace-packed"
    assert detail["rows"] == {"samples": 4}
    (ingest,) = detail["ingests"]
    # the ingest log keeps the client's file name, not the server's temporary path
    assert ingest["file_name"] == "packed_lengths_step_0.jsonl"
    assert ingest["status"] == "ok" and ingest["rows"] == 4 and ingest["bytes"] == len(PACKED)
    # a run with nothing for a query answers empty; only a run that is not here is a 404
    none = httpx.get(f"{srv.url}/api/queries/gpu_time", params={"run_id": run_id})
    assert none.status_code == 200 and none.json()["rows"] == []
    stats = httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id}).json()
    # lengths 1, 3, 5, 7: median 4, max 7, tail ratio 7/4
    row = dict(zip(stats["columns"], stats["rows"][0]))
    assert (row["n"], row["response_p50"], row["response_max"], row["tail_ratio"]) == (4, 4.0, 7, 1.75)

    again = upload(srv, [("renamed.jsonl", PACKED)], name="other")
    assert again.status_code == 200
    assert again.json()["run_id"] == run_id and again.json()["existing"] is True

    deleted = httpx.delete(f"{srv.url}/api/runs/{run_id}")
    assert deleted.json() == {"ok": True, "run_id": run_id}
    assert httpx.get(f"{srv.url}/api/runs").json()["runs"] == []
    assert_error(httpx.get(f"{srv.url}/api/runs/{run_id}"), 404)
    assert sum(table_counts(srv).values()) == 0


# --- uploads of real shared data ------------------------------------------------------------

@pytest.mark.parametrize("workers", [False, True], ids=["parsed in-process", "parsed by forked workers"])
def test_directory_upload_is_one_run_equal_to_cli_ingest(make_server, shared_data, tmp_path, monkeypatch,
                                                          workers):
    folder = shared_data / DAPO
    con = store.open(tmp_path / "cli.duckdb")
    expected = ingest_paths(con, [folder])
    con.close()
    if workers:  # the server's ingest thread forks the parse workers
        monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
        monkeypatch.setenv("POLYTRACE_PARSE_JOBS", "2")
    srv = make_server()
    files = [(f"20260614_023133/{p.name}", p.read_bytes()) for p in sorted(folder.iterdir())]
    r = upload(srv, files)
    assert r.status_code == 201, r.text
    body = r.json()
    # same content, so the same run id and rows as the CLI's directory ingest
    assert body["run_id"] == expected.run_id
    assert body["rows"] == expected.rows
    assert body["rows"]["samples"] == 6 * 96 * 8  # 6 steps x 96 prompts x n_sampling 8
    detail = httpx.get(f"{srv.url}/api/runs/{body['run_id']}").json()
    assert detail["run"]["name"] == "20260614_023133"
    assert sorted(i["file_name"] for i in detail["ingests"]) == sorted(f[0] for f in files)
    assert {i["status"] for i in detail["ingests"]} == {"ok"}


def test_single_real_files_upload(make_server, shared_data):
    srv = make_server()
    step0 = shared_data / RLLM / "packed_lengths_step_0.jsonl"
    timings = shared_data / RLLM / "reward_timings_step_0.jsonl"
    r = upload(srv, [(step0.name, step0.read_bytes()), (timings.name, timings.read_bytes())],
               name="rllm step 0")
    assert r.status_code == 201, r.text
    assert set(r.json()["rows"]) >= {"samples", "rank_stage"}
    gz = upload(srv, [(step0.name + ".gz", gzip.compress(step0.read_bytes()))])
    assert gz.status_code == 201, gz.text
    assert gz.json()["rows"]["samples"] == r.json()["rows"]["samples"]


def test_uploaded_parquet_lake_restores_its_run(make_server, tmp_path):
    from polytrace.store.lake import export_runs

    src = tmp_path / "packed_lengths_step_0.jsonl"
    src.write_bytes(PACKED)
    con = store.open(tmp_path / "origin.duckdb")
    run_id = ingest_paths(con, [src]).run_id
    (tmp_path / "lake").mkdir()
    export_runs(con, [run_id], tmp_path / "lake")
    con.close()
    srv = make_server()
    files = [(str(p.relative_to(tmp_path)), p.read_bytes()) for p in sorted((tmp_path / "lake").rglob("*.parquet"))]
    r = upload(srv, files)
    assert r.status_code == 201, r.text
    assert (r.json()["run_id"], r.json()["format"], r.json()["rows"]) == (run_id, "parquet-lake", {"samples": 4})
    assert upload(srv, files).status_code == 200  # already there


def test_reads_answer_while_an_ingest_runs(make_server, shared_data):
    import threading

    srv = make_server()
    folder = shared_data / "polytrace/search_r1/profile/multiturn_workload_log/0617_0223"
    files = [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]  # ~10 MB of multi-turn JSONL
    done: list[httpx.Response] = []
    uploader = threading.Thread(target=lambda: done.append(upload(srv, files)))
    uploader.start()
    answered_during_ingest = 0
    while uploader.is_alive():
        assert httpx.get(f"{srv.url}/api/runs", timeout=30).status_code == 200
        answered_during_ingest += uploader.is_alive()
    uploader.join()
    assert done[0].status_code == 201, done[0].text
    assert done[0].json()["rows"]["samples"] == 3 * 2048
    # the event loop kept serving while the ingest worked in its thread
    assert answered_during_ingest >= 1


# --- bad input ------------------------------------------------------------------------------

BAD_UPLOADS = [
    # (case, files, form fields, status, fragment of the reason)
    ("truncated JSON line", [("packed_lengths_step_0.jsonl", PACKED + b'{"step": 0, "input": 5, "outp')],
     {}, 400, "packed_lengths_step_0.jsonl"),
    ("empty file", [("packed_lengths_step_0.jsonl", b"")], {}, 400, "empty"),
    ("empty file, format forced", [("packed_lengths_step_0.jsonl", b"")],
     {"format": "polytrace-packed"}, 400, "empty"),
    ("wrong type", [("packed_lengths_step_0.jsonl", b'{"step": 0, "input": 10, "output": "abc"}\n')],
     {}, 400, "output"),
    ("negative length", [("packed_lengths_step_0.jsonl", b'{"step": 0, "input": 10, "output": [1, -3]}\n')],
     {}, 400, "output"),
    ("unknown format", [("notes.txt", b"hello, world\n")], {}, 415, "unknown format"),
    ("no recognised file among several", [("a/notes.txt", b"hi\n"), ("a/more.txt", b"ho\n")],
     {}, 415, "no recognised trace file"),
    ("non-UTF-8", [("packed_lengths_step_0.jsonl", PACKED + b'{"step": 0, "input": \xff\xfe}\n')],
     {}, 400, "packed_lengths_step_0.jsonl"),
]


@pytest.mark.parametrize("case,files,fields,status,fragment", BAD_UPLOADS, ids=[c[0] for c in BAD_UPLOADS])
def test_bad_uploads_change_nothing(make_server, case, files, fields, status, fragment):
    srv = make_server()
    assert upload(srv, [("keep.jsonl", PACKED)]).status_code == 201
    before = table_counts(srv)
    error = assert_error(upload(srv, files, **fields), status, fragment)
    assert "polytrace-upload-" not in error  # no server-side temporary path in the reason
    assert table_counts(srv) == before
    failed = failed_ingests(srv)
    assert failed and failed[-1][1] == error
    assert all("polytrace-upload-" not in name for name, _ in failed)


def test_gzip_bomb_upload_is_refused(make_server, monkeypatch):
    monkeypatch.setenv("POLYTRACE_MAX_INFLATE_BYTES", "200000")
    srv = make_server()
    assert upload(srv, [("keep.jsonl", PACKED)]).status_code == 201
    before = table_counts(srv)
    bomb = gzip.compress(PACKED * 20_000)  # 3.3 MB inflated, about 10 KB on the wire
    assert len(bomb) < 50_000
    assert_error(upload(srv, [("packed_lengths_step_0.jsonl.gz", bomb)]), 400,
                 "POLYTRACE_MAX_INFLATE_BYTES")
    assert table_counts(srv) == before


def test_upload_needs_multipart_with_a_file(make_server):
    srv = make_server()
    assert_error(httpx.post(f"{srv.url}/api/runs", content=b"{}"), 415, "multipart/form-data")
    assert_error(httpx.post(f"{srv.url}/api/runs", files=[("name", (None, b"x"))]), 422, "'file'")
    assert_error(upload(srv, [("a.jsonl", PACKED)], format="nope"), 422, "'format'", "nope")
    assert_error(httpx.post(f"{srv.url}/api/runs", files=[("other", ("a.jsonl", PACKED))]),
                 422, "'other'")


def test_uploaded_names_cannot_escape_the_upload_directory(make_server, tmp_path):
    srv = make_server()
    r = upload(srv, [("../../../../tmp/evil/packed_lengths_step_0.jsonl", PACKED)])
    assert r.status_code == 201, r.text
    assert not Path("/tmp/evil/packed_lengths_step_0.jsonl").exists()
    detail = httpx.get(f"{srv.url}/api/runs/{r.json()['run_id']}").json()
    assert detail["ingests"][0]["file_name"] == "tmp/evil/packed_lengths_step_0.jsonl"


# --- limits ---------------------------------------------------------------------------------

def test_declared_size_over_the_limit_is_413_before_reading(make_server):
    srv = make_server(max_upload_bytes=1000)
    error = assert_error(upload(srv, [("big.jsonl", PACKED * 20)]), 413, "POLYTRACE_MAX_UPLOAD_BYTES")
    assert "1000" in error
    assert table_counts(srv)["runs"] == 0
    assert upload(srv, [("small.jsonl", PACKED)]).status_code == 201


def raw_chunked_post(port: int, chunks: list[bytes], finish: bool) -> bytes:
    """POST a chunked multipart body by hand; without `finish` the body never ends."""
    boundary = b"polytraceboundary"
    head = (b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: multipart/form-data; boundary=" + boundary + b"\r\n\r\n")
    preamble = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; '
                b'filename="packed_lengths_step_0.jsonl"\r\n\r\n')
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        for data in [preamble, *chunks] + ([b"\r\n--" + boundary + b"--\r\n"] if finish else []):
            s.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        if finish:
            s.sendall(b"0\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            got = s.recv(65536)
            if not got:
                break
            reply += got
    return reply


def test_streamed_upload_is_cut_at_the_limit_during_the_upload(make_server):
    srv = make_server(max_upload_bytes=4096)
    # 8 KB sent and the body never finished: the 413 can only come from counting while streaming
    reply = raw_chunked_post(srv.port, [b"x" * 2048] * 4, finish=False)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body["status"] == 413 and "POLYTRACE_MAX_UPLOAD_BYTES" in body["error"]
    assert table_counts(srv)["runs"] == 0
    # the same framing under the limit goes through
    ok = raw_chunked_post(srv.port, [PACKED], finish=True)
    assert ok.startswith(b"HTTP/1.1 201 "), ok[:200]


def test_row_cap_truncates_every_format(make_server, tmp_path):
    srv = make_server(row_cap=2)
    run_id = upload(srv, [("packed_lengths_step_0.jsonl", THREE_STEPS)]).json()["run_id"]
    url = f"{srv.url}/api/queries/length_stats"
    body = httpx.get(url, params={"run_id": run_id}).json()
    assert body["truncated"] is True and [r[0] for r in body["rows"]] == [0, 1]
    csv = httpx.get(url, params={"run_id": run_id, "format": "csv"})
    assert csv.headers["x-polytrace-truncated"] == "true"
    assert [line.split(",")[0] for line in csv.text.splitlines()] == ["step", "0", "1"]
    parquet = httpx.get(url, params={"run_id": run_id, "format": "parquet"})
    assert parquet.headers["x-polytrace-truncated"] == "true"
    assert pq.read_table(io.BytesIO(parquet.content)).column("step").to_pylist() == [0, 1]


def test_slow_query_is_interrupted_with_504_naming_the_setting(make_server, extra_queries):
    srv = make_server(query_timeout_ms=300)
    started = time.perf_counter()
    r = httpx.get(f"{srv.url}/api/queries/slow_cross_join", params={"run_id": "x"}, timeout=30)
    elapsed = time.perf_counter() - started
    assert_error(r, 504, "slow_cross_join", "300 ms", "POLYTRACE_QUERY_TIMEOUT_MS")
    assert elapsed < 5, f"interrupt took {elapsed:.1f} s"
    # the connection is still usable afterwards
    assert httpx.get(f"{srv.url}/api/runs").json() == {"ok": True, "runs": []}


BIG_LIST_SQL = """-- name: big_list
-- title: Deliberately large
-- Test fixture: one list of 50 million numbers (400 MB), which DuckDB cannot spill.
-- @column n BIGINT  Its length.
SELECT len(list(range)) AS n FROM range(50000000)
"""


def test_a_query_past_the_memory_limit_is_507_and_the_server_goes_on(make_server, extra_queries):
    (extra_queries / "big_list.sql").write_text(BIG_LIST_SQL)
    srv = make_server(memory_limit="64MiB")
    assert srv.app.state.db.con.execute("SELECT current_setting('memory_limit')").fetchall() == [("64.0 MiB",)]
    assert_error(httpx.get(f"{srv.url}/api/queries/big_list", timeout=60), 507, "big_list",
                 "POLYTRACE_MEMORY_LIMIT is 67,108,864 bytes")
    assert httpx.get(f"{srv.url}/api/queries/non_finite").status_code == 200


def test_a_query_that_finds_every_slot_taken_for_its_time_limit_is_503_with_retry_after(make_server, extra_queries):
    srv = make_server(query_slots=1, query_timeout_ms=300)
    slots = srv.app.state.db._slots
    assert slots.acquire(timeout=5)  # a heavy query holds the only slot
    try:
        busy = httpx.get(f"{srv.url}/api/queries/non_finite", timeout=30)
        assert_error(busy, 503, "running 1 queries already", "POLYTRACE_QUERY_SLOTS")
        assert busy.headers["retry-after"] == "1"
    finally:
        slots.release()
    assert httpx.get(f"{srv.url}/api/queries/non_finite", timeout=30).status_code == 200


def test_non_finite_floats_are_null_in_json_and_empty_in_csv(make_server, extra_queries):
    srv = make_server()
    body = httpx.get(f"{srv.url}/api/queries/non_finite").json()
    assert body == {"ok": True, "columns": ["nan", "pos_inf", "neg_inf", "finite"],
                    "rows": [[None, None, None, 1.5]], "truncated": False}
    csv = httpx.get(f"{srv.url}/api/queries/non_finite", headers={"Accept": "text/csv"})
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text == "nan,pos_inf,neg_inf,finite\n,,,1.5\n"
    parquet = httpx.get(f"{srv.url}/api/queries/non_finite", params={"format": "parquet"})
    (row,) = pq.read_table(io.BytesIO(parquet.content)).to_pylist()
    assert math.isnan(row["nan"]) and row["pos_inf"] == math.inf and row["finite"] == 1.5


# --- result cache ---------------------------------------------------------------------------

def test_cached_answers_never_outlive_a_write(make_server):
    srv = make_server(result_cache_rows=1000)
    url = f"{srv.url}/api/queries/runs"

    def run_ids() -> tuple[list, list]:
        rows = httpx.get(url).json()["rows"]
        parquet = pq.read_table(io.BytesIO(httpx.get(url, params={"format": "parquet"}).content))
        return [r[0] for r in rows], parquet.column("run_id").to_pylist()

    assert run_ids() == run_ids() == ([], [])  # the second time from the cache
    run_id = upload(srv, [("a.jsonl", PACKED)]).json()["run_id"]
    assert run_ids() == ([run_id], [run_id])
    httpx.delete(f"{srv.url}/api/runs/{run_id}")
    assert run_ids() == ([], [])


def test_result_cache_drops_answers_computed_across_a_write():
    import pyarrow as pa

    from polytrace.queries.runner import Answer
    from polytrace.server.db import ResultCache

    def answer(rows: int, label: str) -> Answer:
        return Answer(pa.table({"label": [label] * rows}), False)

    cache = ResultCache(max_rows=100)
    before = cache.generation
    cache.clear()  # a write landed while the answer was being computed
    cache.put(("k",), before, answer(1, "stale"))
    assert cache.get(("k",)) is None
    fresh = answer(1, "fresh")
    cache.put(("k",), cache.generation, fresh)
    assert cache.get(("k",)) is fresh
    cache.put(("big",), cache.generation, answer(26, "over a quarter of the budget"))
    assert cache.get(("big",)) is None
    for i in range(30):  # 30 answers of 5 rows: only the newest 20 fit in 100 rows
        cache.put((i,), cache.generation, answer(5, str(i)))
    assert cache.get((0,)) is None and cache.get((29,)).rows[0] == ("29",)
    assert cache.get((10,)).rows[0] == ("10",)
    off = ResultCache(max_rows=0)
    off.put(("k",), off.generation, answer(0, "empty answer"))
    assert off.get(("k",)) is None

def test_readers_cannot_write_or_touch_files(make_server, tmp_path):
    srv = make_server()
    db = srv.app.state.db
    with db.reader() as cur, pytest.raises(duckdb.TransactionException):
        cur.execute("INSERT INTO runs (run_id) VALUES ('x')")
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with db.reader() as cur, pytest.raises(duckdb.PermissionException):
        cur.execute(f"SELECT * FROM read_csv('{secret}')")


# --- auth and CORS --------------------------------------------------------------------------

def test_token_guards_writes_and_leaves_reads_open(make_server):
    srv = make_server(token="s3cret")
    assert httpx.get(f"{srv.url}/api/health").json()["writes_need_token"] is True
    assert_error(upload(srv, [("a.jsonl", PACKED)]), 401, "Bearer")
    assert_error(upload(srv, [("a.jsonl", PACKED)], token="wrong"), 401, "token")
    assert table_counts(srv)["runs"] == 0
    r = upload(srv, [("a.jsonl", PACKED)], token="s3cret")
    assert r.status_code == 201
    run_id = r.json()["run_id"]
    assert httpx.get(f"{srv.url}/api/runs/{run_id}").status_code == 200
    assert httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id}).status_code == 200
    refused = httpx.delete(f"{srv.url}/api/runs/{run_id}")
    assert_error(refused, 401)
    assert refused.headers["www-authenticate"] == "Bearer"
    assert httpx.delete(f"{srv.url}/api/runs/{run_id}",
                        headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_cors_is_off_by_default_and_configurable(make_server):
    origin = {"Origin": "http://dashboard.example"}
    off = make_server()
    assert "access-control-allow-origin" not in httpx.get(f"{off.url}/api/health", headers=origin).headers
    on = make_server(cors_origins=["http://dashboard.example"])
    r = httpx.get(f"{on.url}/api/health", headers=origin)
    assert r.headers["access-control-allow-origin"] == "http://dashboard.example"


# --- the serve command ----------------------------------------------------------------------

def test_serve_warns_when_open_to_the_network_without_a_token(tmp_path):
    from tests.conftest import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "polytrace", "serve", "--db", str(tmp_path / "w.duckdb"),
         "--host", "0.0.0.0", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env={**_clean_env(), "POLYTRACE_TOKEN": ""})
    try:
        lines = [proc.stderr.readline() for _ in range(2)]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert lines[0].startswith("warning: serving on 0.0.0.0 without POLYTRACE_TOKEN")
    assert lines[1].startswith(f"PolyTrace serving {tmp_path / 'w.duckdb'} at http://0.0.0.0:{port}/")


def test_a_database_another_process_writes_is_one_line_naming_that_process_exit_2(tmp_path):
    """`serve`, and a reader such as `query`, on a file a writer holds: which process holds it, and
    what to do."""
    db = tmp_path / "locked.duckdb"
    # a stand-in for a server: a script named polytrace, run as `polytrace serve --db DB`
    script = tmp_path / "bin" / "polytrace"
    script.parent.mkdir()
    script.write_text("import duckdb, sys\nc = duckdb.connect(sys.argv[3])\nprint('ready', flush=True)\n"
                      "sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, str(script), "serve", "--db", str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        outs = [subprocess.run([sys.executable, "-m", "polytrace", *args, "--db", str(db)],
                               capture_output=True, text=True, timeout=60, env=_clean_env())
                for args in (["serve", "--port", "0"], ["query", "runs"])]
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    for out in outs:
        assert out.returncode == 2
        assert out.stderr.startswith(f"error: cannot open database {db}: another process has it open "
                                     f"(PID {holder.pid}: polytrace serve --db {db}), ")
        assert "stop that process, or if it is a PolyTrace server (`polytrace serve` or `demo`), go " \
               "through it" in out.stderr
        assert out.stderr.count("\n") == 1


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}


def test_settings_come_from_the_environment(monkeypatch):
    from polytrace.settings import Settings

    monkeypatch.setenv("POLYTRACE_CORS_ORIGINS", "http://a.example, http://b.example")
    monkeypatch.setenv("POLYTRACE_TOKEN", "")
    monkeypatch.setenv("POLYTRACE_QUERY_TIMEOUT_MS", "1234")
    assert Settings().upload_timeout_s == 600
    monkeypatch.setenv("POLYTRACE_UPLOAD_TIMEOUT_S", "2.5")
    s = Settings()
    assert s.cors_origins == ["http://a.example", "http://b.example"]
    assert s.token is None and s.query_timeout_ms == 1234 and s.upload_timeout_s == 2.5
    assert s.exposure_warning() is None  # loopback
    assert "POLYTRACE_TOKEN" in Settings(host="0.0.0.0").exposure_warning()
    assert Settings(host="0.0.0.0", token="t").exposure_warning() is None
    monkeypatch.setenv("POLYTRACE_CORS_ORIGINS", '["http://c.example"]')
    assert Settings().cors_origins == ["http://c.example"]


def test_serve_rejects_a_bad_setting_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "polytrace", "serve", "--db", str(tmp_path / "s.duckdb"),
                          "--port", "0"],
                         capture_output=True, text=True, timeout=60,
                         env={**_clean_env(), "POLYTRACE_QUERY_TIMEOUT_MS": "0"})
    assert out.returncode == 2
    assert out.stderr == "error: setting POLYTRACE_QUERY_TIMEOUT_MS: must be more than 0, not 0\n"


def test_unusable_file_names_are_4xx(make_server):
    srv = make_server()
    # a 4.1 KB path fits in the part's header but not in PATH_MAX once under the upload directory
    deep = "/".join(["d" * 99] * 41) + "/x.jsonl"
    assert_error(upload(srv, [(deep, PACKED)]), 422, "'file'")
    huge = "/".join(["d" * 99] * 50) + "/x.jsonl"  # past the multipart header limit
    assert_error(upload(srv, [(huge, PACKED)]), 400, "header")
    wide = "é" * 300 + ".jsonl"  # 600 bytes in one name: cut to fit, still ingested
    assert upload(srv, [(wide, PACKED)]).status_code == 201


# --- what if on demand, run facts on upload --------------------------------------------------

VERL_LOG = b"step:1 - timing_s/gen:6.0 - timing_s/step:10.0\nstep:2 - timing_s/gen:3.0 - timing_s/step:8.0\n"


def test_whatif_simulates_a_run_on_demand(make_server):
    srv = make_server(token="s3cret")
    run_id = upload(srv, [("packed_lengths_step_0.jsonl", THREE_STEPS)], token="s3cret").json()["run_id"]
    url = f"{srv.url}/api/runs/{run_id}/whatif"
    assert_error(httpx.post(url), 401, "Bearer")  # a write: the same token rule as uploads
    assert table_counts(srv)["whatif"] == 0
    r = httpx.post(url, headers={"Authorization": "Bearer s3cret"}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    policies = ["as-recorded", "round-robin", "length-balanced", "predicted-balanced", "partial-rollout:0.9"]
    assert body["ok"] and body["run_id"] == run_id and body["policies"] == policies
    # 3 steps x 5 policies summary rows, plus engine rows: 2 engines in step 0, 1 in steps 1, 2
    assert body["rows"] == table_counts(srv)["whatif"] >= 3 * 5 + 5 * (2 + 1 + 1)
    savings = httpx.get(f"{srv.url}/api/queries/whatif_savings", params={"run_id": run_id}).json()
    rows = {r[0]: dict(zip(savings["columns"], r)) for r in savings["rows"]}
    assert set(rows) == set(policies)
    assert rows["as-recorded"]["run_gpu_hours_saved"] == 0 and rows["as-recorded"]["steps"] == 3
    assert rows["length-balanced"]["dispatch"] == "length-balanced (perfect-knowledge bound)"
    assert rows["length-balanced"]["saved_s"] >= 0  # the oracle is never slower
    # Simulating again replaces the results instead of adding to them.
    again = httpx.post(url, headers={"Authorization": "Bearer s3cret"}, timeout=60).json()
    assert again["rows"] == table_counts(srv)["whatif"] == body["rows"]


def test_whatif_refuses_unknown_runs_and_runs_without_ranks(make_server):
    srv = make_server()
    assert_error(httpx.post(f"{srv.url}/api/runs/nope/whatif"), 404, "unknown run 'nope'")
    run_id = upload(srv, [("output.log", VERL_LOG)]).json()["run_id"]
    error = assert_error(httpx.post(f"{srv.url}/api/runs/{run_id}/whatif"), 409)
    assert error == f"run {run_id!r} has no samples with a dp_rank: the simulation needs per-rank response lengths"
    assert table_counts(srv)["whatif"] == 0


def test_upload_sets_the_cap_and_gpus_the_files_lack(make_server):
    srv = make_server()
    assert_error(upload(srv, [("a.jsonl", PACKED)], max_response_len="-3"), 422, "'max_response_len'")
    assert_error(upload(srv, [("a.jsonl", PACKED)], n_gpus="eight"), 422, "'n_gpus'")
    assert table_counts(srv)["runs"] == 0
    r = upload(srv, [("a.jsonl", PACKED)], max_response_len="7", n_gpus="8")
    assert r.status_code == 201, r.text
    run = httpx.get(f"{srv.url}/api/runs/{r.json()['run_id']}").json()["run"]
    assert (run["max_response_len"], run["n_gpus"]) == (7, 8)
    summary = httpx.get(f"{srv.url}/api/queries/run_summary", params={"run_id": run["run_id"]}).json()
    row = dict(zip(summary["columns"], summary["rows"][0]))
    # lengths 1, 3, 5, 7 under a cap of 7: one of four at the cap
    assert (row["cap_ratio"], row["max_response_len"]) == (0.25, 7)


def test_perfetto_download_is_capped_at_the_row_cap(make_server, tmp_path):
    from polytrace.queries.perfetto import PATH_TID
    from tests.test_kineto import RANK0, trace_doc, write_json

    trace = write_json(tmp_path / "rank0.json", trace_doc(0, [(1, 0, 10000), (2, 10000, 10000)], RANK0))
    con = store.open(tmp_path / "server.duckdb")
    run = ingest_paths(con, [trace]).run_id
    con.close()
    srv = make_server(row_cap=3)
    r = httpx.get(f"{srv.url}/ui/perfetto", params={"run_id": run, "rank": 0, "step": 1})
    assert r.status_code == 200, r.text
    doc = r.json()
    # step 1 of rank 0 holds 8 GPU events (k0..k7) on its streams (tid >= 0); the first 3 by
    # start time are sent, and its critical path's track is cut at 3 slices too
    assert [e["ts"] for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] >= 0] == [200, 1000, 2500]
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == PATH_TID]) == 3
    assert doc["otherData"]["truncated"] is True
    missing = httpx.get(f"{srv.url}/ui/perfetto", params={"run_id": run, "rank": 5})
    assert_error(missing, 404, "no GPU events")
    # a run with no profiled rank at all: no "rank None" reaches the user
    nothing = httpx.get(f"{srv.url}/ui/perfetto", params={"run_id": "nope"})
    assert_error(nothing, 404, "no GPU events for run 'nope'")
    assert "None" not in nothing.json()["error"]


def test_an_upload_being_parsed_holds_no_writer_and_a_client_gets_two_at_once(make_server, monkeypatch):
    """Parsing happens in the upload's staging database: meanwhile other writes commit; a third
    upload from the same address while two are parsing is a 429."""
    import threading

    from polytrace import service

    srv = make_server()
    other = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)]).json()["run_id"]
    started, release, answers = threading.Semaphore(0), threading.Event(), []
    real = service.stage_run

    def held(*args, **kwargs):
        started.release()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "stage_run", held)
    sends = [threading.Thread(target=lambda k=k: answers.append(
        upload(srv, [("packed_lengths_step_1.jsonl", PACKED.replace(b"10", b"%d" % (20 + k)))]))) for k in range(2)]
    try:
        for t in sends:
            t.start()
        assert started.acquire(timeout=60) and started.acquire(timeout=60)  # both are parsing
        # the writer is free: a delete commits while they parse
        assert httpx.delete(f"{srv.url}/api/runs/{other}", timeout=20).status_code == 200
        third = upload(srv, [("packed_lengths_step_2.jsonl", PACKED)])
        assert_error(third, 429, "2 uploads from this address are in progress")
        assert third.headers["retry-after"] == "5"
    finally:
        release.set()
        for t in sends:
            t.join(60)
    assert sorted(a.status_code for a in answers) == [201, 201]
    assert len(httpx.get(f"{srv.url}/api/runs").json()["runs"]) == 2

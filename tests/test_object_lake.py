"""The lake in object storage, against moto's S3-compatible server on loopback (tests/conftest.py
`s3`): every catalog query as on the database, publishing whole runs or none (concurrent
publishers, a publisher killed halfway), vacuum, a server that follows new runs, bad URLs, and
credentials that never show."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import FileSelector, FileType, S3FileSystem

from bench.compare import row_differences
from polytrace import service, store
from polytrace.cli import main
from polytrace.queries.catalog import get_query, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.store import object_lake
from polytrace.store.errors import StoreError
from polytrace.store.lake import export_runs, open_lake
from polytrace.store.runs import row_counts
from tests.conftest import S3_BUCKET, S3_SECRET
from tests.edge_lake import RUNS, build_database, params_for

LAKE = f"s3://{S3_BUCKET}/lake"
JOB = Path(__file__).parent / "fixtures/kineto/gloo_2rank"


def keys(endpoint: str, under: str) -> list[str]:
    fs = S3FileSystem(endpoint_override=endpoint)
    return sorted(i.path for i in fs.get_file_info(FileSelector(f"{S3_BUCKET}/{under}", recursive=True,
                                                                allow_not_found=True))
                  if i.type == FileType.File)


def test_every_catalog_query_is_the_same_over_the_s3_lake(s3):
    native = build_database()
    service.export_runs(native, list(RUNS), LAKE)
    over_s3 = open_lake(LAKE)
    try:
        compared, differences = 0, {}
        for name, query in load_catalog().items():
            for params in params_for(query):
                expected, actual = run_bound(native, query, params), run_bound(over_s3, query, params)
                compared += bool(expected.rows)
                if actual.columns != expected.columns or row_differences(expected.rows, actual.rows):
                    differences[name] = row_differences(expected.rows, actual.rows)[:3]
        assert differences == {}
        assert compared >= len(load_catalog())  # every query had rows to compare
    finally:
        over_s3.close()
        native.close()


def test_a_run_is_published_as_data_files_then_one_commit(s3):
    native = build_database()
    service.export_runs(native, ["0001"], LAKE)
    commit = json.loads(S3FileSystem(endpoint_override=s3).open_input_stream(
        f"{S3_BUCKET}/lake/commits/0001.json").read())
    data = keys(s3, "lake/data")
    assert commit["run_id"] == "0001" and "runs" in commit["tables"] and "samples" in commit["tables"]
    assert data == sorted(f"{S3_BUCKET}/lake/data/table={t}/run_id=0001/{commit['digest']}.parquet"
                          for t in commit["tables"])
    fs = S3FileSystem(endpoint_override=s3)
    assert commit["sizes"] == {t: fs.get_file_info(f"{S3_BUCKET}/lake/data/table={t}/run_id=0001/"
                                                   f"{commit['digest']}.parquet").size for t in commit["tables"]}
    # the same content again: the same objects, the same commit
    service.export_runs(native, ["0001"], LAKE)
    assert keys(s3, "lake/data") == data
    assert object_lake.commits(object_lake.location(LAKE))[0]["digest"] == commit["digest"]


def test_a_commit_without_sizes_reads_the_same_rows(s3):
    """A commit written before commits named their files' sizes: each file's size is asked for."""
    native = build_database()
    service.export_runs(native, list(RUNS), LAKE)
    fs = S3FileSystem(endpoint_override=s3)
    counts = "SELECT run_id, count(*), sum(hash(samples)) FROM samples GROUP BY ALL ORDER BY ALL"
    with open_lake(LAKE) as con:
        with_sizes = con.execute(counts).fetchall()
    commit = json.loads(fs.open_input_stream(f"{S3_BUCKET}/lake/commits/0001.json").read())
    del commit["sizes"]
    with fs.open_output_stream(f"{S3_BUCKET}/lake/commits/0001.json") as out:
        out.write(json.dumps(commit).encode())
    with open_lake(LAKE) as con:
        assert con.execute(counts).fetchall() == with_sizes
        assert [r[0] for r in with_sizes] == sorted(RUNS)
    native.close()


def test_ingest_from_the_store_into_the_store_and_back(s3, tmp_path, capsys):
    fs = S3FileSystem(endpoint_override=s3)
    for f in JOB.iterdir():
        with fs.open_output_stream(f"{S3_BUCKET}/raw/gloo-job/{f.name}") as out:
            out.write(f.read_bytes())
    assert main(["ingest", f"s3://{S3_BUCKET}/raw/gloo-job/", "--lake", LAKE]) == 0
    run = capsys.readouterr().out.strip()
    assert main(["ingest", f"s3://{S3_BUCKET}/raw/gloo-job", "--lake", LAKE]) == 0
    assert capsys.readouterr().out.strip() == run  # the same content: already in the lake
    db = tmp_path / "local.duckdb"
    assert main(["ingest", f"s3://{S3_BUCKET}/raw/gloo-job", "--db", str(db)]) == 0
    assert capsys.readouterr().out.strip() == run
    con = store.open(db, "r")
    try:
        assert con.execute("SELECT name FROM runs").fetchall() == [("gloo-job",)]
        assert con.execute("SELECT file_name FROM ingests ORDER BY 1").fetchall() == [
            (f"s3://{S3_BUCKET}/raw/gloo-job/rank0.json.gz",), (f"s3://{S3_BUCKET}/raw/gloo-job/rank1.json.gz",)]
        for name in ("gpu_clocks", "gpu_stragglers", "gpu_critical_path", "run_summary"):
            assert main(["query", name, "--lake", LAKE, "--output", "json", "-p", f"run_id={run}"]) == 0
            over_lake = json.loads(capsys.readouterr().out)
            assert main(["query", name, "--db", str(db), "--output", "json", "-p", f"run_id={run}"]) == 0
            assert over_lake == json.loads(capsys.readouterr().out) != [], name
    finally:
        con.close()


def _publisher_script(template: Path, prefix: str, runs: int, pause_s: float = 0.0) -> str:
    """A process that publishes copies of the template run as new run ids (run_id is the
    partition key, not a column: a renamed partition folder is another run)."""
    return f"""
import shutil, sys, tempfile, time
from pathlib import Path
from polytrace.store import object_lake
original = object_lake._upload
def slow_upload(*args):
    original(*args)
    time.sleep({pause_s})
object_lake._upload = slow_upload
template = Path({str(template)!r})
where = object_lake.location({LAKE!r})
for j in range({runs}):
    run_id = f"{prefix}-{{j:03d}}"
    local = Path(tempfile.mkdtemp())
    for table in template.iterdir():
        shutil.copytree(table / "run_id=0001", local / table.name / f"run_id={{run_id}}")
    object_lake.publish(local, [run_id], where)
    shutil.rmtree(local)
"""


@pytest.fixture
def template(tmp_path) -> Path:
    native = build_database()
    try:
        export_runs(native, ["0001"], tmp_path / "template")
    finally:
        native.close()
    return tmp_path / "template"


def test_ingest_of_a_lake_in_the_store_restores_its_runs(s3, tmp_path, capsys, monkeypatch):
    """`polytrace ingest s3://…/lake` restores each published run whole, with its id and rows, as
    `ingest lake/` does for a folder; past the inflate limit it is refused before anything is read."""
    native = build_database()
    try:
        service.export_runs(native, list(RUNS), LAKE)
        want = {run_id: row_counts(native, run_id) for run_id in RUNS}
    finally:
        native.close()
    db = tmp_path / "restored.duckdb"
    assert main(["ingest", LAKE, "--db", str(db)]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(RUNS)
    with store.open(db, "r") as con:
        assert {run_id: row_counts(con, run_id) for run_id in RUNS} == want
        assert all(want.values())
    assert main(["lake", "compact", LAKE]) == 0  # and from the compacted files
    assert main(["ingest", LAKE, "--db", str(tmp_path / "compacted.duckdb")]) == 0
    with store.open(tmp_path / "compacted.duckdb", "r") as con:
        assert {run_id: row_counts(con, run_id) for run_id in RUNS} == want
    capsys.readouterr()
    monkeypatch.setenv("POLYTRACE_MAX_INFLATE_BYTES", "1000")
    assert main(["ingest", LAKE, "--db", str(tmp_path / "small.duckdb")]) == 2
    assert "bytes of data objects, over the 1,000-byte limit" in capsys.readouterr().err


def test_concurrent_publishers_lose_nothing_and_readers_see_only_whole_runs(s3, template):
    publishers, runs_each, readers = 8, 50, 4
    expected_samples = 480  # run 0001 of the edge database: 20 steps x 4 ranks x 3 prompts x 2
    procs = [subprocess.Popen([sys.executable, "-c", _publisher_script(template, f"p{i}", runs_each)],
                              stderr=subprocess.PIPE) for i in range(publishers)]
    seen, problems, done = [], [], threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                con = open_lake(LAKE)
            except StoreError as e:  # nothing published yet
                assert "holds no published run" in str(e)
                continue
            try:
                overview = {r[0] for r in run_bound(con, get_query("runs_overview"), {}).rows}
                counts = dict(con.execute("SELECT run_id, count(*) FROM samples GROUP BY run_id").fetchall())
            finally:
                con.close()
            seen.append(len(overview))
            if set(counts) != overview or any(n != expected_samples for n in counts.values()):
                problems.append((len(overview), sorted(set(overview) ^ set(counts))[:5]))
            time.sleep(1.0)  # a poll, as a dashboard's (a server follows at most every 2 s); the
            # publishers share the one moto process, which each reader's open reads every commit from

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for t in threads:
        t.start()
    try:
        for p in procs:
            assert p.wait(timeout=600) == 0, p.stderr.read().decode()[-2000:]
    finally:
        done.set()
        for t in threads:
            t.join(timeout=120)
    assert problems == []
    assert len(seen) >= readers and max(seen) <= publishers * runs_each
    con = open_lake(LAKE)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchone() == (400, 400)
        assert con.execute("SELECT count(*) FROM samples").fetchone() == (400 * expected_samples,)
    finally:
        con.close()


def test_a_publisher_killed_halfway_leaves_no_visible_run_and_vacuum_clears_it(s3, template):
    service.export_runs(build_database(), ["run.b"], LAKE)
    proc = subprocess.Popen([sys.executable, "-c", _publisher_script(template, "killed", 1, pause_s=30)],
                            stderr=subprocess.PIPE)
    try:
        uploaded = lambda: [k for k in keys(s3, "lake/data") if "run_id=killed-000" in k]  # noqa: E731
        for _ in range(600):
            if uploaded() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert uploaded(), proc.stderr.read().decode()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    orphans = [k for k in keys(s3, "lake/data") if "run_id=killed-000" in k]
    assert orphans and not keys(s3, "lake/commits/killed-000.json")
    con = open_lake(LAKE)
    try:
        assert con.execute("SELECT run_id FROM runs").fetchall() == [("run.b",)]
    finally:
        con.close()
    assert object_lake.vacuum(LAKE, grace_s=3600) == []  # a publisher may still be uploading them
    assert object_lake.vacuum(LAKE, grace_s=0) == orphans
    assert [k for k in keys(s3, "lake/data") if "killed" in k] == []
    assert len(keys(s3, "lake/commits")) == 1


def test_a_server_over_the_s3_lake_follows_runs_others_publish(s3, make_server):
    native = build_database()
    try:
        service.export_runs(native, ["0001"], LAKE)
        server = make_server(lake=LAKE)
        runs = lambda: [r["run_id"] for r in httpx.get(f"{server.url}/api/runs").json()["runs"]]  # noqa: E731
        assert runs() == ["0001"]
        service.export_runs(native, ["run.b"], LAKE)
        for _ in range(600):  # the server lists the commits at most every 2 s (a busy machine: longer)
            if sorted(runs()) == ["0001", "run.b"]:
                break
            time.sleep(0.1)
        assert sorted(runs()) == ["0001", "run.b"]
        page = httpx.get(f"{server.url}/runs/run.b", timeout=120)  # every GPU and step query, over S3
        assert page.status_code == 200 and S3_SECRET not in page.text
        assert httpx.post(f"{server.url}/api/runs", files={"file": ("x.jsonl", b"{}\n")}).status_code == 405
    finally:
        native.close()


@pytest.mark.parametrize("url,said", [
    (f"s3://AKIATESTPOLYTRACE:{S3_SECRET}@{S3_BUCKET}/lake", "names a bucket and a prefix only"),
    ("s3://Not_A_Bucket/lake", "is not an S3 bucket name"),
    (f"s3://{S3_BUCKET}/lake/../other", "may not hold . or .. segments"),
    (f"s3://{S3_BUCKET}/empty", "holds no published run"),
])
def test_bad_lake_urls_are_refused_in_one_line(s3, capsys, url, said):
    assert main(["query", "runs", "--lake", url]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and S3_SECRET not in err


def test_a_damaged_commit_is_named(s3, capsys):
    with S3FileSystem(endpoint_override=s3).open_output_stream(f"{S3_BUCKET}/lake/commits/0001.json") as out:
        out.write(b'{"run_id": "0001", "digest": "not hex", "tables": ["runs"]}')
    assert main(["query", "runs", "--lake", LAKE]) == 2
    assert "commits/0001.json is not a PolyTrace commit" in capsys.readouterr().err


def test_credentials_never_show(s3, tmp_path, capsys, monkeypatch):
    native = build_database()
    try:
        service.export_runs(native, ["0001"], LAKE)
    finally:
        native.close()
    said = []
    for argv in (["query", "runs", "--lake", LAKE], ["lake", "vacuum", LAKE, "--grace-hours", "0"],
                 ["ingest", f"s3://{S3_BUCKET}/missing", "--db", str(tmp_path / "x.duckdb")]):
        main(argv)
        said.append(capsys.readouterr())
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: an error from the client
    assert main(["query", "runs", "--lake", LAKE]) == 2
    said.append(capsys.readouterr())
    text = "".join(o.out + o.err for o in said)
    assert "Could not connect" in text or "connect" in text.lower()
    assert S3_SECRET not in text and "AKIATESTPOLYTRACE" not in text
    for key in keys(s3, "lake"):
        body = S3FileSystem(endpoint_override=s3).open_input_stream(key).read()
        assert S3_SECRET.encode() not in body and b"AKIATESTPOLYTRACE" not in body


def test_a_client_error_carrying_a_secret_is_blanked(s3):
    e = object_lake.failure("s3://team/lake", OSError(f"denied for {S3_SECRET}\nmore"))
    assert str(e) == "s3://team/lake: denied for ***"


def test_spark_over_an_s3_lake_says_what_it_lacks(s3, capsys):
    assert main(["query", "runs", "--lake", LAKE, "--engine", "spark"]) == 2
    assert "s3a connector (hadoop-aws)" in capsys.readouterr().err


def test_a_compacted_lake_answers_the_same_and_opens_without_reading_commits(s3, capsys):
    native = build_database()
    try:
        service.export_runs(native, list(RUNS), LAKE)
        assert main(["lake", "compact", LAKE]) == 0
        assert "compacted 2 run(s)" in capsys.readouterr().err
        seen = object_lake.snapshot(object_lake.location(LAKE))
        assert (seen.covered, seen.commits) == (sorted(RUNS), [])  # no commit read: the index covers all
        compacted = [k for k in keys(s3, "lake/compact")]
        assert compacted and all(k.endswith(".parquet") for k in compacted)
        fs = S3FileSystem(endpoint_override=s3)  # each table's rows of both runs in one row group
        assert {pq.ParquetFile(fs.open_input_file(k)).metadata.num_row_groups for k in compacted} == {1}
        over_s3 = open_lake(LAKE)
        try:
            differences = {name: row_differences(run_bound(native, q, p).rows, run_bound(over_s3, q, p).rows)[:3]
                           for name, q in load_catalog().items() for p in params_for(q)}
            assert {k: v for k, v in differences.items() if v} == {}
        finally:
            over_s3.close()
        # run.b published again with other content: read from its new files, not the index's
        native.execute("UPDATE runs SET name = 'edge dotted id, again' WHERE run_id = 'run.b'")
        service.export_runs(native, ["run.b"], LAKE)
        seen = object_lake.snapshot(object_lake.location(LAKE))
        assert seen.covered == ["0001"] and [c["run_id"] for c in seen.commits] == ["run.b"]
        over_s3 = open_lake(LAKE)
        try:
            assert over_s3.execute("SELECT run_id, name FROM runs ORDER BY run_id").fetchall() == [
                ("0001", "edge numeric id"), ("run.b", "edge dotted id, again")]
            assert over_s3.execute("SELECT count(*) FROM samples").fetchone() == \
                native.execute("SELECT count(*) FROM samples").fetchone()
        finally:
            over_s3.close()
        # vacuum keeps the index's files and every committed run's
        assert all("compact" not in k for k in object_lake.vacuum(LAKE, grace_s=0))
        assert keys(s3, "lake/compact") == compacted
    finally:
        native.close()


def test_a_damaged_index_is_named(s3, capsys):
    native = build_database()
    try:
        service.export_runs(native, ["0001"], LAKE)
    finally:
        native.close()
    with S3FileSystem(endpoint_override=s3).open_output_stream(f"{S3_BUCKET}/lake/index.json") as out:
        out.write(b'{"id": "0123456789abcdef", "runs": {"0001": {"digest": "x"}}, "files": {}}')
    assert main(["query", "runs", "--lake", LAKE]) == 2
    assert "index.json is not a PolyTrace index" in capsys.readouterr().err


def test_a_compacted_run_is_known_to_ingest_from_the_index(s3):
    native = build_database()
    try:
        native.execute("UPDATE runs SET sha256 = 'sha-of-' || run_id")  # the edge runs carry none
        service.export_runs(native, list(RUNS), LAKE)
        before = object_lake.known_runs(LAKE)
        assert before == [("0001", "sha-of-0001"), ("run.b", "sha-of-run.b")]
        object_lake.compact(LAKE)
        assert object_lake.snapshot(object_lake.location(LAKE)).commits == []
        assert object_lake.known_runs(LAKE) == before
    finally:
        native.close()


def test_compacted_row_groups_gather_small_batches_up_to_a_bound_of_rows_or_bytes(monkeypatch):
    import pyarrow as pa

    batches = [pa.record_batch({"x": list(range(k, k + 3))}) for k in range(0, 21, 3)]  # 7 batches of 3 rows
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    monkeypatch.setattr(object_lake, "ROW_GROUP_ROWS", 5)
    assert [t.column("x").to_pylist() for t in object_lake.row_groups(reader)] == [
        [0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19, 20]]
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    monkeypatch.setattr(object_lake, "ROW_GROUP_ROWS", 100)
    monkeypatch.setattr(object_lake, "ROW_GROUP_BYTES", 2 * batches[0].nbytes)
    assert [t.num_rows for t in object_lake.row_groups(reader)] == [6, 6, 6, 3]

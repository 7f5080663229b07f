"""Nsight Systems exports: the shared reports against their raw tables, the same events as a
Kineto trace giving the same GPU answers, NVTX ranges as stages, ranks, and bad input."""
from __future__ import annotations

import gzip
import math
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import nsys
from polytrace.ingest.load import ingest_paths
from tests.test_kineto import RANK0, run_query, trace_doc, write_json

MEMORY_KIND = {"Pageable": 0, "Device": 2}


def build(path: Path, events: list[tuple], steps: list[tuple] = (), ranges: list[tuple] = (),
          device: int = 0, env: list[str] = (), session_ns: int | None = 0) -> Path:
    """An export in nsys's schema (the sample's tables) with Kineto-style event tuples
    (name, cat, stream, start us, end us, correlation, launch us or None), ProfilerStep ranges
    (n, start us, dur us) and other NVTX ranges (text, start us, end us), all on process 1."""
    us = 1000
    with closing(sqlite3.connect(path)) as con:
        con.executescript(nsys._SAMPLE_SQL)
        for table in ("StringIds", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_RUNTIME",
                      "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS"):
            con.execute(f"DELETE FROM {table}")
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                    "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
                    "globalPid INTEGER, value INTEGER, bytes INTEGER, memKind INTEGER)")
        con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
        con.executemany("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                        [(v,) for v in env])
        if session_ns is not None:
            con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, NULL, NULL, 0)", [session_ns])
        strings: dict[str, int] = {}

        def sid(text: str) -> int:
            if text not in strings:
                strings[text] = len(strings) + 1
                con.execute("INSERT INTO StringIds VALUES (?, ?)", [strings[text], text])
            return strings[text]

        pid, tid = 1 << 24, (1 << 24) + 1
        for name, cat, stream, start, end, corr, launch in events:
            row = [start * us, end * us, device, 1, stream, corr, pid]
            if cat == "kernel":
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            row + [sid(name)] * 2)
            elif cat == "gpu_memcpy":  # Memcpy HtoD (Pageable -> Device)
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?, ?, 4096, 1, 0, 2)", row)
            else:  # Memset (Device)
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, ?, ?, ?, ?, ?, 0, 4096, 2)", row)
            if launch is not None:
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
                            [launch * us, launch * us + 5 * us, tid, corr, sid("cudaLaunchKernel")])
        for n, start, dur in steps:
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                        [start * us, (start + dur) * us, f"ProfilerStep#{n}", tid])
        for text, start, end in ranges:
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) VALUES (?, ?, 60, ?, ?)",
                        [start * us, end * us, sid(text), tid])
        con.commit()
    return path


STEPS = [(1, 0, 10000), (2, 10000, 10000)]


def test_sniff_claims_the_sqlite_magic_only(shared_data, tmp_path):
    assert registry.detect(shared_data / "nsys/report1.sqlite").name == "nsys"
    (tmp_path / "x.sqlite").write_bytes(b"SQLite format 2\x00" + bytes(100))
    assert registry.detect(tmp_path / "x.sqlite") is None


def test_the_same_events_give_the_same_gpu_answers_as_a_kineto_trace(con, tmp_path):
    kineto = ingest_paths(con, [write_json(tmp_path / "rank0.json", trace_doc(0, STEPS, RANK0))]).run_id
    export = ingest_paths(con, [build(tmp_path / "rank0.sqlite", RANK0, STEPS)]).run_id
    for query in ("gpu_time", "gpu_kernels", "gpu_breakdown", "gpu_idle_gaps"):
        for last in (False, True):
            expected = run_query(con, query, run_id=kineto, include_last_step=last)
            assert expected, query
            assert run_query(con, query, run_id=export, include_last_step=last) == expected, (query, last)
    steps = "SELECT rank, step, ts_us, dur_us FROM profiler_steps WHERE run_id = ? ORDER BY step"
    assert con.execute(steps, [export]).fetchall() == con.execute(steps, [kineto]).fetchall()


def test_the_shared_reports_agree_with_their_raw_tables(con, shared_data):
    for report in ("report1", "report2"):
        path = shared_data / f"nsys/{report}.sqlite"
        result = ingest_paths(con, [path])
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as raw:
            base = raw.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
            spans = [(s, e, kind) for kind in ("KERNEL", "MEMCPY", "SYNCHRONIZATION")
                     for s, e in raw.execute(f"SELECT start, end FROM CUPTI_ACTIVITY_KIND_{kind}")]
        kernels = [e - s for s, e, k in spans if k == "KERNEL"]
        copies = [e - s for s, e, k in spans if k == "MEMCPY"]
        assert result.rows["gpu_events"] == len(kernels) + len(copies) == 16
        # HTA's breakdown by hand: every event rounded inward to whole us on the UTC clock
        whole = sorted((math.ceil((s + base) / 1000), math.floor((e + base) / 1000)) for s, e, _ in spans)
        busy, open_ = 0, None
        for s, e in whole:
            if open_ is None or s > open_[1]:
                busy += open_[1] - open_[0] if open_ else 0
                open_ = [s, e]
            else:
                open_[1] = max(open_[1], e)
        busy += open_[1] - open_[0]
        span = max(e for _, e in whole) - min(s for s, _ in whole)
        [row] = run_query(con, "gpu_time", run_id=result.run_id, include_last_step=False)
        assert row[:5] == (0, None, span, busy, span - busy)
        by_category = dict(con.execute("SELECT category, sum(dur_us) FROM gpu_events WHERE run_id = ? GROUP BY ALL",
                                       [result.run_id]).fetchall())
        assert by_category == {"compute": pytest.approx(sum(kernels) / 1000),
                               "memory": pytest.approx(sum(copies) / 1000)}
        first = con.execute("SELECT min(ts_us) FROM gpu_events WHERE run_id = ?", [result.run_id]).fetchone()[0]
        assert first == pytest.approx((base + min(s for s, _, k in spans if k != "SYNCHRONIZATION")) / 1000, abs=0.5)
        assert con.execute("SELECT device, rank_from FROM gpu_ranks WHERE run_id = ?", [result.run_id]).fetchall() \
            == [("NVIDIA GeForce RTX 4060 Ti", "default")]
        assert {n for (n,) in con.execute("SELECT name FROM kernel_names WHERE run_id = ?", [result.run_id]).fetchall()} \
            == {"add_parallel(const float *, const float *, float *, int)", "Memcpy HtoD (Pinned -> Device)",
                "Memcpy DtoH (Device -> Pinned)"}


def test_nvtx_ranges_carry_the_gpu_work_launched_inside_them(con, tmp_path):
    sample = tmp_path / "report_rank0.sqlite"
    sample.write_bytes(registry.get("nsys").sample().files["report_rank0.sqlite"])
    result = ingest_paths(con, [sample])
    # update_actor [100, 250) us launched the GEMM (50 us) and the all-reduce (30 us); the copy's
    # launch (correlation 5) is not in the trace, so no range has it
    assert run_query(con, "gpu_stage_time", run_id=result.run_id) == [
        (0, "update_actor", "update_actor", 1, 150.0, 2, 80.0, 110.0, pytest.approx(37.5), 0.0,
         pytest.approx(80 / 150 * 100))]
    ts = con.execute("SELECT ts_us, gpu_start_us, gpu_end_us FROM gpu_ranges").fetchone()
    assert ts == (1.7e15 + 100, 1.7e15 + 120, 1.7e15 + 230)


def test_ranks_come_from_the_name_the_environment_or_the_device(con, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    build(job / "profile_rank1.sqlite", RANK0, STEPS)
    build(job / "worker.sqlite", RANK0, STEPS, env=['HOME="/root"', 'RANK="3"', 'WORLD_SIZE="4"'])
    result = ingest_paths(con, [job])
    assert con.execute("SELECT rank, rank_from, world_size FROM gpu_ranks ORDER BY rank").fetchall() == [
        (1, "file name", None), (3, "environment", 4)]
    assert con.execute("SELECT n_gpus FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == (4,)
    both = build(tmp_path / "tree.sqlite", RANK0, STEPS)
    with closing(sqlite3.connect(both)) as raw:
        raw.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE streamId = 9")
        raw.commit()
    tree = ingest_paths(con, [both])
    assert con.execute("SELECT rank, rank_from, gpu_events FROM gpu_ranks WHERE run_id = ? ORDER BY rank",
                       [tree.run_id]).fetchall() == [(0, "device id", 9), (1, "device id", 2)]


def test_a_gzipped_export_is_the_same_run(con, tmp_path, shared_data):
    packed = tmp_path / "report1.sqlite.gz"
    packed.write_bytes(gzip.compress((shared_data / "nsys/report1.sqlite").read_bytes()))
    gz = ingest_paths(con, [packed]).run_id
    plain = ingest_paths(con, [shared_data / "nsys/report1.sqlite"]).run_id
    rows = "SELECT rank, stream, category, name_id, ts_us, dur_us FROM gpu_events WHERE run_id = ? ORDER BY ts_us"
    assert con.execute(rows, [gz]).fetchall() == con.execute(rows, [plain]).fetchall()


def _refused(con, path: Path) -> str:
    before = store.runs.count(con)
    with pytest.raises(IngestError) as e:
        ingest_paths(con, [path])
    assert "\n" not in str(e.value) and store.runs.count(con) == before
    return str(e.value)


def test_bad_exports_are_refused_in_one_line(con, tmp_path):
    plain = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(plain)) as raw:
        raw.execute("CREATE TABLE t (a)")
        raw.commit()
    assert "not an `nsys export --type sqlite` file" in _refused(con, plain)
    # a view in a kernel table's place is not read: only the file's tables are
    view = tmp_path / "view.sqlite"
    with closing(sqlite3.connect(view)) as raw:
        raw.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
                          "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(n) AS "
                          "(SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n AS start FROM r;")
    assert "without Nsight Systems tables" in _refused(con, view)
    no_gpu = build(tmp_path / "cpu.sqlite", [])
    assert "no GPU kernels" in _refused(con, no_gpu)
    long_name = build(tmp_path / "long.sqlite", RANK0[:1])
    with closing(sqlite3.connect(long_name)) as raw:
        raw.execute("UPDATE StringIds SET value = ? WHERE value = 'gemm_a'", ["k" * (nsys.MAX_VALUE_BYTES + 1)])
        raw.commit()
    assert "unreadable SQLite data" in _refused(con, long_name)
    cut = tmp_path / "cut.sqlite"
    data = build(tmp_path / "whole.sqlite", RANK0, STEPS).read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    assert f"{len(data) // 2:,} bytes where its SQLite header states {len(data):,}" in _refused(con, cut)
    # SQLite itself ignores bytes appended to a database: the header's page count does not
    appended = tmp_path / "appended.sqlite"
    appended.write_bytes(data + b"9" * 4096 + b"\n")
    assert "truncated, or bytes appended" in _refused(con, appended)
    short = tmp_path / "short.sqlite"
    short.write_bytes(nsys.MAGIC)
    assert "no SQLite header" in _refused(con, short)
    missing = build(tmp_path / "old.sqlite", RANK0)
    with closing(sqlite3.connect(missing)) as raw:
        raw.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN streamId")
        raw.commit()
    assert "CUPTI_ACTIVITY_KIND_KERNEL has no column streamId" in _refused(con, missing)


def test_an_export_without_a_session_start_says_its_clock_is_its_own(con, tmp_path):
    result = ingest_paths(con, [build(tmp_path / "rank0.sqlite", RANK0, STEPS, session_ns=None)])
    assert any("capture's own clock" in w for w in result.warnings)
    assert run_query(con, "gpu_clocks", run_id=result.run_id) == [(0, "own", None, 0.0, False, 0.0)]


def test_ranks_captured_apart_are_compared_on_the_utc_clock(con, tmp_path):
    """Two ranks' exports with the same events, rank 1's session started 2.5 ms after rank 0's:
    on the UTC clock rank 1 starts every step (and its last NCCL kernel) 2,500 us later."""
    job = tmp_path / "job"
    job.mkdir()
    session = 1_700_000_000 * 10**9
    build(job / "report_rank0.sqlite", RANK0, STEPS, session_ns=session)
    build(job / "report_rank1.sqlite", RANK0, STEPS, session_ns=session + 2_500_000)
    run = ingest_paths(con, [job]).run_id
    assert run_query(con, "gpu_clocks", run_id=run) == [(0, "nsys session start", 0, 0.0, True, 0.0),
                                                        (1, "nsys session start", 0, 0.0, True, 2500.0)]
    lags = [(r[0], r[1], r[8], r[9]) for r in run_query(con, "gpu_stragglers", run_id=run)]
    assert lags == [(1, 0, 0.0, 0.0), (1, 1, 2500.0, 2500.0), (2, 0, 0.0, 0.0), (2, 1, 2500.0, 2500.0)]


def test_kineto_user_annotations_carry_the_gpu_work_their_launches_made(con, shared_data):
    """The same projection on a real Kineto trace, checked against its raw events: each
    record_function range gets the kernels, memcpys and memsets whose runtime launch lies in it."""
    import gzip as gz
    import json

    path = shared_data / "kineto/nccl_parser_config/nccl_data.json.gz"
    events = json.loads(gz.decompress(path.read_bytes()))["traceEvents"]
    device = {e["args"]["correlation"]: e for e in events if e.get("ph") == "X"
              and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {})}
    launches = [(e["ts"], e["args"]["correlation"]) for e in events if e.get("cat") == "cuda_runtime"
                and e.get("args", {}).get("correlation") in device]
    expected: dict[str, list] = {}
    for r in (e for e in events if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep")):
        mine = [device[c] for ts, c in launches if r["ts"] <= ts < r["ts"] + r["dur"]]
        row = expected.setdefault(r["name"], [0, 0, 0.0, 0.0])
        row[0] += 1
        row[1] += len(mine)
        row[2] += sum(k["dur"] for k in mine)
        row[3] += sum(k["dur"] for k in mine if "nccl" in k["name"].lower())
    run = ingest_paths(con, [path]).run_id
    got = {r[1]: [r[3], r[5], r[6], r[6] * (r[8] or 0) / 100] for r in run_query(con, "gpu_stage_time", run_id=run)}
    assert got.keys() == expected.keys() and len(got) == 8
    for name, (ranges, n, gpu_us, comm_us) in expected.items():
        assert got[name] == [ranges, n, pytest.approx(gpu_us), pytest.approx(comm_us, abs=1e-6)], name
    assert got["nccl:all_reduce"][1] == 15 and got["## backward ##"][1] == 2391

"""The ranks of one job on one clock: each trace file's origin (Kineto's baseTimeNanoseconds, the
Unix epoch, an nsys session start), the shift that puts every rank on the job's clock, and the
straggler query read on it. The two-rank job was written by PyTorch itself
(tests/fixtures/kineto/write_two_rank_traces.py); its variants move one rank's origin and times
by the same amount, which must change nothing a query says about the job."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from tests.test_kineto import run_query, write_json

JOB = Path(__file__).parent / "fixtures/kineto/gloo_2rank"
BASE_NS = 1_790_857_026_000_000_000  # both files' baseTimeNanoseconds
QUARTER_S = 7_889_238  # libkineto's base period: the wall clock floored to 3 x 2,629,746 s


def raw(rank: int) -> dict:
    return json.loads(gzip.decompress((JOB / f"rank{rank}.json.gz").read_bytes()))


def step_starts_ns(doc: dict) -> dict[int, int]:
    """Each ProfilerStep's start in Unix ns, from the file as PyTorch wrote it."""
    return {int(e["name"].split("#")[1]): doc["baseTimeNanoseconds"] + round(e["ts"] * 1000)
            for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}


def hand_start_lags_us() -> dict[tuple[int, int], float]:
    starts = [step_starts_ns(raw(0)), step_starts_ns(raw(1))]
    return {(step, rank): (starts[rank][step] - min(s[step] for s in starts)) / 1000
            for step in starts[0] for rank in (0, 1)}


def job_with(tmp_path: Path, rank0: dict) -> Path:
    """The job with rank 0's file replaced by `rank0` (rank 1 as PyTorch wrote it)."""
    job = tmp_path / "job"
    job.mkdir()
    write_json(job / "rank0.json", rank0)
    (job / "rank1.json").write_bytes(gzip.decompress((JOB / "rank1.json.gz").read_bytes()))
    return job


def start_lags(con, run: str) -> dict[tuple[int, int], float]:
    return {(r[0], r[1]): r[8] for r in run_query(con, "gpu_stragglers", run_id=run)}


def test_the_job_as_pytorch_wrote_it(con):
    run = ingest_paths(con, [JOB]).run_id
    assert run_query(con, "gpu_clocks", run_id=run) == [
        (0, "baseTimeNanoseconds", BASE_NS, 0.0, True, pytest.approx(927.315, abs=1e-3)),
        (1, "baseTimeNanoseconds", BASE_NS, 0.0, True, 0.0)]
    # each step's start lag is the raw files' base + ts difference: rank 1 entered step 2
    # 5733209707253.072 - 5733209703475.078 = 3,777.994 us after rank 0
    assert start_lags(con, run) == {k: pytest.approx(v, abs=1e-3) for k, v in hand_start_lags_us().items()}
    assert start_lags(con, run)[(2, 1)] == pytest.approx(3777.994, abs=1e-3)


def test_a_rank_that_started_profiling_a_quarter_earlier(con, tmp_path):
    """libkineto floors its base to a quarter year per process: a rank whose profiler started
    before the quarter turned has a base 7,889,238 s earlier and its times that much larger."""
    doc = raw(0)
    doc["baseTimeNanoseconds"] = BASE_NS - QUARTER_S * 10**9
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += QUARTER_S * 10**6
    run = ingest_paths(con, [job_with(tmp_path, doc)]).run_id
    clocks = run_query(con, "gpu_clocks", run_id=run)
    assert [(r[0], r[2], r[3], r[4]) for r in clocks] == [
        (0, BASE_NS - QUARTER_S * 10**9, 0.0, True), (1, BASE_NS, QUARTER_S * 1e6, True)]
    # a double of 2.1e13 us keeps 1/256 us: the lags agree to that
    assert clocks[0][5] == pytest.approx(927.315, abs=4e-3)
    # unshifted, rank 0 would start each step 91.3 days after rank 1
    assert start_lags(con, run) == {k: pytest.approx(v, abs=4e-3) for k, v in hand_start_lags_us().items()}


def test_a_rank_written_on_the_unix_epoch(con, tmp_path):
    """Kineto before baseTimeNanoseconds wrote us since the epoch; a job mixing the two still
    lines up (to the 0.25 us a double keeps at that size)."""
    doc = raw(0)
    base_us = doc.pop("baseTimeNanoseconds") // 1000
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += base_us
    run = ingest_paths(con, [job_with(tmp_path, doc)]).run_id
    assert [r[:5] for r in run_query(con, "gpu_clocks", run_id=run)] == [
        (0, "Unix epoch", 0, 0.0, True), (1, "baseTimeNanoseconds", BASE_NS, BASE_NS / 1000, True)]
    assert start_lags(con, run) == {k: pytest.approx(v, abs=0.5) for k, v in hand_start_lags_us().items()}


def test_a_clock_of_its_own_shifts_no_rank(con, tmp_path):
    """Small times and no base: the origin is unknown, so the ranks are compared as written."""
    for rank, start in ((0, 100.0), (1, 40.0)):
        write_json(tmp_path / f"rank{rank}.json", {"traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": start, "dur": 10}]})
    run = ingest_paths(con, [tmp_path]).run_id
    assert run_query(con, "gpu_clocks", run_id=run) == [(0, "own", None, 0.0, False, 60.0),
                                                        (1, "own", None, 0.0, False, 0.0)]
    assert start_lags(con, run) == {(1, 0): 60.0, (1, 1): 0.0}


@pytest.mark.parametrize("base", [-1, "soon", 2**63])
def test_a_base_that_is_not_a_time_is_refused(con, tmp_path, base):
    write_json(tmp_path / "rank0.json", {"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 1, "dur": 10}]})
    with pytest.raises(IngestError, match="baseTimeNanoseconds .* is not a time in ns since the Unix epoch"):
        ingest_paths(con, [tmp_path])
    assert con.execute("SELECT count(*) FROM gpu_ranks").fetchone() == (0,)

"""PyTorch profiler memory timelines: the sample by hand, the shared timeline against HTA 0.5's own
sums, peaks per profiler step, and bad input."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats.memory_timeline import CATEGORIES
from polytrace.ingest.load import ingest_paths
from tests.test_kineto import run_query, write_json

T_US = 1_700_000_000_000_000  # the sample's first real time (us since the epoch)


def sample(tmp_path: Path) -> Path:
    path = tmp_path / "memory_rank0.raw.json"
    path.write_bytes(registry.get("memory-timeline").sample().files["memory_rank0.raw.json"])
    return path


def test_the_sample_sums_by_hand(con, tmp_path):
    run = ingest_paths(con, [sample(tmp_path)]).run_id
    # parameter 4096 and optimizer state 1024 before profiling, then at t an activation of 2048,
    # at t+1 us a temporary of 512, at t+2 that temporary versioned into a gradient, at t+3 the
    # activation freed; the pre-existing row shares t's time, so t keeps the state after both
    rows = con.execute("SELECT rank, ts_us - ?, parameter_bytes, optimizer_state_bytes, temporary_bytes, "
                       "activation_bytes, gradient_bytes, total_bytes FROM gpu_memory WHERE run_id = ? ORDER BY ts_us",
                       [T_US, run]).fetchall()
    assert rows == [(0, 0.0, 4096, 1024, 0, 2048, 0, 7168), (0, 1.0, 4096, 1024, 512, 2048, 0, 7680),
                    (0, 2.0, 4096, 1024, 0, 2048, 512, 7680), (0, 3.0, 4096, 1024, 0, 0, 512, 5632)]
    # the peak is first reached at t+1 us, with the temporary live
    assert run_query(con, "gpu_memory_peak", run_id=run) == [
        (0, None, None, 7680, pytest.approx(0.001), 4096, 1024, 2048, 0, 512, 5632, None)]


def test_peaks_per_profiler_step_of_the_same_run(con, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    sample(job)
    # a Kineto trace of rank 0 with step 1 over [t, t+1.5) us and step 2 over [t+1.5, t+10) us
    write_json(job / "rank0.json", {"distributedInfo": {"rank": 0}, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": T_US, "dur": 1.5},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": T_US + 1.5, "dur": 8.5}]})
    run = ingest_paths(con, [job]).run_id
    rows = run_query(con, "gpu_memory_peak", run_id=run)
    assert [(r[2], r[3], r[4], r[10]) for r in rows] == [
        (None, 7680, pytest.approx(0.001), 5632), (1, 7680, pytest.approx(0.001), 7168),
        (2, 7680, pytest.approx(0.002), 5632)]


def test_the_shared_timeline_agrees_with_hta(con, shared_data):
    memory_analysis = pytest.importorskip("hta.memory_analysis")
    path = shared_data / "kineto/memory_analysis/memory_timeline.raw.gz"
    times, sizes = memory_analysis.MemoryAnalysis(str(path))._process_raw_events()
    # HTA keeps a row per change of time in file order; where two rows share a time (the
    # pre-existing row moved to the first time) the later one is the state after both
    expected = {}
    for t, size in zip(times, sizes):
        expected[t] = size
    run = ingest_paths(con, [path]).run_id
    columns = ", ".join(f"{c}_bytes" for c in CATEGORIES)
    rows = con.execute(f"SELECT ts_us, {columns}, total_bytes FROM gpu_memory WHERE run_id = ? ORDER BY ts_us",
                       [run]).fetchall()
    assert len(rows) == len(expected) == 7720
    # times are kept in us as doubles: to a quarter of a us at today's epoch
    assert [(pytest.approx(r[0], abs=0.25), list(r[1:9])) for r in rows] == \
        [(t / 1000, s) for t, s in sorted(expected.items())]
    assert all(r[9] == sum(r[1:9]) for r in rows)
    [peak] = run_query(con, "gpu_memory_peak", run_id=run)
    assert peak[3] == max(sum(s) for s in sizes) == 3_082_832_104
    first = min(t for t, s in expected.items() if sum(s) == peak[3])
    assert peak[4] == pytest.approx((first - min(times)) / 1e6, abs=1e-3)
    timeline = run_query(con, "gpu_memory_timeline", run_id=run, rank=0, bins=400)
    assert len(timeline) <= 400 and max(r[6] for r in timeline) == peak[3]


@pytest.mark.parametrize("text, reason", [
    (b"[]", "no entries"),
    (b"[[1, 2, 3, 4], [5, 2, 6, 9]]", "does not end with ]"),
    (b"[[1, 2, 3, 4]", "does not end with ]"),
    (b"[[1, 2, 3, 4], [5, 2, 99999999999999999999, 1]]", "does not end with ]"),
    (b"[[1, 2, 3, 4], [5, 2, 9300000000000000000, 1]]", "beyond 64 bits"),
    (b"[[1, 2, 3, 4]]" + b" " * 10 + b"x", "does not end with ]"),
])
def test_bad_timelines_are_refused_in_one_line(con, tmp_path, text, reason):
    path = tmp_path / "m.raw.json"
    path.write_bytes(text)
    before = store.runs.count(con)
    with pytest.raises(IngestError, match=reason) as e:
        ingest_paths(con, [path], format="memory-timeline")
    assert "\n" not in str(e.value) and store.runs.count(con) == before


def test_a_gzipped_timeline_with_a_rank_in_its_name(con, tmp_path, shared_data):
    entries = json.loads(gzip.decompress((shared_data / "kineto/memory_analysis/memory_timeline.raw.gz").read_bytes()))
    path = tmp_path / "memory_timeline_rank3.raw.json.gz"
    path.write_bytes(gzip.compress(json.dumps(entries[:100], indent=1).encode()))
    result = ingest_paths(con, [path])
    assert not result.warnings
    assert con.execute("SELECT DISTINCT rank FROM gpu_memory WHERE run_id = ?", [result.run_id]).fetchall() == [(3,)]


def test_peaks_per_nvtx_stage_on_one_clock(con, tmp_path):
    from tests.test_kineto import RANK0
    from tests.test_nsys import build

    job = tmp_path / "job"
    job.mkdir()
    sample(job)
    # an export of rank 0 whose capture began at the sample's first time: update_actor over
    # [t+1, t+3) us holds the rows at t+1 and t+2 (7680 each); gen over [t, t+4) holds all four
    build(job / "report_rank0.sqlite", RANK0[:1], ranges=[("update_actor", 1, 3), ("gen", 0, 4)],
          session_ns=T_US * 1000)
    run = ingest_paths(con, [job]).run_id
    assert run_query(con, "gpu_memory_stage_peak", run_id=run) == [
        (0, None, "gen", "gen", 1, 7680, pytest.approx(0.001), 2048, 7680 - 5632),
        (0, None, "update_actor", "update_actor", 1, 7680, pytest.approx(0.001), 2048, 0)]


FIXTURES = Path(__file__).parent / "fixtures" / "kineto"


def test_a_trace_torch_wrote_with_profile_memory_peaks_at_its_own_total_allocated(con):
    path = FIXTURES / "cpu_memory_rank0.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    memory = [(e["ts"], e["args"]["Total Allocated"]) for e in events if e.get("name") == "[memory]"]
    steps = sorted((int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("name", "").startswith("ProfilerStep#"))
    update = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "update_actor"]
    result = ingest_paths(con, [path])
    assert "447 [memory] event(s)" in " ".join(result.warnings)
    rows = run_query(con, "gpu_memory_peak", run_id=result.run_id)
    whole, *per_step = rows
    assert whole[:4] == (0, "cpu", None, max(b for _, b in memory)) == (0, "cpu", None, 9_447_440)
    # no category is known: the whole peak is other, and nothing was reserved on the CPU
    assert whole[5:9] == (None, None, None, None) and whole[9] == whole[3] and whole[11] == 0
    assert [(r[2], r[3]) for r in per_step] == [
        (n, max(b for t, b in memory if start <= t < end)) for n, start, end in steps]
    stage = {r[2]: r for r in run_query(con, "gpu_memory_stage_peak", run_id=result.run_id)}
    assert stage["update_actor"][4:6] == (len(update), max(b for t, b in memory if any(s <= t < e for s, e in update)))


def test_a_span_without_an_entry_draws_what_was_live_before_it(con, tmp_path):
    # 100 bytes from 0 us, 300 from 10 us; in 4 spans of 2.5 us the two middle ones have no
    # entry: memory held at 100 there, not at nothing
    path = write_json(tmp_path / "rank0.json", {"traceEvents": [
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts,
         "args": {"Total Allocated": b, "Total Reserved": 512, "Device Type": 1, "Device Id": 0, "Bytes": 0}}
        for ts, b in [(0, 100), (10, 300)]]})
    run = ingest_paths(con, [path]).run_id
    rows = run_query(con, "gpu_memory_timeline", run_id=run, rank=0, bins=4)
    assert [(r[0], r[6]) for r in rows] == [(0.0, 100), (0.0025, 100), (0.005, 100), (0.0075, 300)]


def test_memory_events_per_device_keep_the_state_after_each_time(con, tmp_path):
    def mem(ts, allocated, reserved, kind, index):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts,
                "args": {"Total Allocated": allocated, "Total Reserved": reserved, "Device Type": kind,
                         "Device Id": index, "Bytes": 0}}

    # cuda:1 takes 100 then 300 bytes at the same time (the state after both: 400), frees 100;
    # the CPU holds 50; an event without Total Allocated is skipped and said
    path = write_json(tmp_path / "rank1.json", {"traceEvents": [
        mem(10, 100, 2048, 1, 1), mem(10, 400, 2048, 1, 1), mem(12, 300, 4096, 1, 1), mem(11, 50, 0, 0, -1),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 13, "args": {"Device Type": 1}}]})
    result = ingest_paths(con, [path])
    assert "skipped 1 [memory] event(s)" in " ".join(result.warnings)
    rows = con.execute("SELECT rank, device, ts_us, unknown_bytes, total_bytes, reserved_bytes, parameter_bytes "
                       "FROM gpu_memory WHERE run_id = ? ORDER BY device, ts_us", [result.run_id]).fetchall()
    assert rows == [(1, "cpu", 11.0, 50, 50, 0, None), (1, "cuda:1", 10.0, 400, 400, 2048, None),
                    (1, "cuda:1", 12.0, 300, 300, 4096, None)]
    assert [r[:4] + r[11:] for r in run_query(con, "gpu_memory_peak", run_id=result.run_id)] == [
        (1, "cpu", None, 50, 0), (1, "cuda:1", None, 400, 2048)]
    # 'auto' draws the device that held the most
    timeline = run_query(con, "gpu_memory_timeline", run_id=result.run_id, rank=1, bins=2)
    assert [r[6] for r in timeline] == [400, 300]
    assert [r[6] for r in run_query(con, "gpu_memory_timeline", run_id=result.run_id, rank=1, device="cpu")] == [50]

"""Critical paths of Kineto traces: a hand-made step by hand, and HTA 0.5's own answers on its
critical-path test traces.

HTA 0.5's critical_path_analysis cannot run under pandas 3 (ValueError: Cannot specify both
'axis' and 'index'/'columns'), so its answers below were taken by running HolisticTraceAnalysis
0.5.0 with pandas 2.3.3 in its own environment, with the annotations and instances HTA's own
tests use (tests/test_critical_path_analysis.py): the path's length (the sum of its edges'
weights), its events, its edges, and HTA's bound_by breakdown in us.
"""
from __future__ import annotations

import gzip
import json

import pytest

from polytrace.ingest.critical_path import (CPU, CPU_OP, EDGE_FIELDS, OPERATOR, WHOLE_TRACE, Timeline,
                                            critical_paths)
from polytrace.ingest.load import ingest_paths
from polytrace.queries.perfetto import PATH_TID, chrome_trace
from tests.test_kineto import run_query, write_json

ALEX = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
# trace, annotation, instance, window start (us, the file's clock), length, events, edges,
# cpu, gpu compute, launch overhead, kernel-kernel overhead (HTA's bound_by sums, us)
HTA_05 = [
    ("simple_add/benchmark_result_493459_1694039959_trace.json.gz", ALEX, 1, 1694040009854190,
     241724, 159, 314, 241190, 508, 17, 9),
    ("alexnet/benchmark_result_2869224_1695835535_trace.json.gz", ALEX, 1, 1695835585827782,
     35834, 77, 148, 32042, 3712, 30, 50),
    ("cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0, 1707417525509335, 2401, 22, 39, 2335, 38, 28, 0),
    # annotation "" in HTA: the whole trace (a test added after 0.5, run here with 0.5)
    ("end_to_end/simple_add/input/trace.json.gz", "(whole trace)", 0, None, 41435234, 600, 1159,
     41380750, 40992, 1595, 11897),
]


@pytest.mark.parametrize("case", HTA_05, ids=lambda c: c[0].split("/")[0])
def test_paths_equal_hta_05(con, shared_data, case):
    name, annotation, instance, start, length, events, edges, cpu, compute, launch, gap = case
    run = ingest_paths(con, [shared_data / "kineto/critical_path" / name]).run_id
    row = con.execute(
        "SELECT ts_us, length_us, events, edges, cpu_us, gpu_compute_us, gpu_communication_us, launch_overhead_us, "
        "kernel_kernel_overhead_us FROM critical_paths WHERE run_id = ? AND annotation = ? AND instance = ?",
        [run, annotation, instance]).fetchone()
    assert row[0] == start or start is None
    assert row[1:] == (length, events, edges, cpu, compute, 0, launch, gap)
    # the edges sum to the length, and each edge starts where the previous one ended
    path = con.execute("SELECT ts_us, dur_us, type FROM critical_path_edges WHERE run_id = ? AND annotation = ? "
                       "AND instance = ? ORDER BY seq", [run, annotation, instance]).fetchall()
    assert len(path) == edges and sum(d for _, d, _ in path) == length
    assert all(t + (d if kind != "dependency" and kind != "sync_dependency" else 0) <= nxt + 1e-9
               for (t, d, kind), (nxt, _, _) in zip(path, path[1:]))


def _step(tmp_path):
    """ProfilerStep#1 over [0, 100) us on thread 1: cpu_op step [0, 100) launches gemm at 10
    (cudaLaunchKernel [10, 20)), gemm runs on stream 7 over [25, 80), and
    cudaStreamSynchronize [30, 90) waits for it."""
    def cpu(cat, name, ts, dur, corr=None):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {} if corr is None else {"correlation": corr}}
    return write_json(tmp_path / "rank0.json", {"traceEvents": [
        cpu("user_annotation", "ProfilerStep#1", 0, 100), cpu("cpu_op", "step", 0, 100),
        cpu("cuda_runtime", "cudaLaunchKernel", 10, 10, 1), cpu("cuda_runtime", "cudaStreamSynchronize", 30, 60, 2),
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 25, "dur": 55,
         "args": {"stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 30, "dur": 60,
         "args": {"stream": 7, "correlation": 2}}]})


def test_a_step_by_hand(con, tmp_path):
    run = ingest_paths(con, [_step(tmp_path)]).run_id
    # step start -> launch start (10, cpu) -> gemm start (15, launch delay: the stream was empty)
    # -> gemm end (55, compute) -> the sync's end (0: it waited) -> step end (10, cpu) = 90; the
    # CPU's own way (10 + 10 + 10 + 0 + 10 = 40) is shorter; the span is 100, so 10 us waited
    assert run_query(con, "gpu_critical_path", run_id=run) == [
        (0, "ProfilerStep", 0, 1, 100.0, 90.0, pytest.approx(100 * 20 / 90), pytest.approx(100 * 55 / 90), 0.0,
         pytest.approx(100 * 15 / 90), 0.0, 10.0, 4)]
    edges = con.execute("SELECT type, bound, name, track, ts_us, dur_us FROM critical_path_edges WHERE run_id = ? "
                        "ORDER BY seq", [run]).fetchall()
    assert edges == [("operator", "cpu", "step", "thread 1", 0.0, 10.0),
                     ("launch_delay", "launch_overhead", "gemm", "stream 7", 10.0, 15.0),
                     ("operator", "gpu_compute", "gemm", "stream 7", 25.0, 55.0),
                     ("sync_dependency", None, None, "stream 7", 80.0, 0.0),
                     ("operator", "cpu", "step", "thread 1", 90.0, 10.0)]
    top = run_query(con, "gpu_critical_path_top", run_id=run, top=2)
    assert [(r[3], r[4], r[5]) for r in top] == [("gemm", "gpu_compute", 55.0), ("step", "cpu", 20.0)]
    # the bar of the breakdown chart: the length by what bounds it, and the waiting on top
    assert run_query(con, "gpu_critical_path_breakdown", run_id=run) == [
        ("rank 0 · step 1", 20.0, 55.0, 0.0, 15.0, 0.0, 10.0)]



def test_the_perfetto_export_marks_the_path_on_a_track_of_its_own(con, tmp_path):
    run = ingest_paths(con, [_step(tmp_path)]).run_id
    events = chrome_trace(con, run, rank=0, step=1)["traceEvents"]
    track = [e for e in events if e.get("tid") == PATH_TID]
    assert track[0]["args"] == {"name": "critical path"}
    # the edges that carry time (test_a_step_by_hand)
    assert [(e["name"], e["cat"], e["ts"], e["dur"], e["args"]["on"]) for e in track[1:]] == [
        ("step", "cpu", 0.0, 10.0, "thread 1"), ("gemm", "launch_overhead", 10.0, 15.0, "stream 7"),
        ("gemm", "gpu_compute", 25.0, 55.0, "stream 7"), ("step", "cpu", 90.0, 10.0, "thread 1")]


def test_the_path_inside_each_rl_stage_by_hand(con, tmp_path):
    path = _step(tmp_path)
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for name, ts, dur in [("generate_sequences", 0, 10), ("update_actor", 20, 75)]]
    write_json(path, doc)
    run = ingest_paths(con, [path]).run_id
    # the annotations change no edge of the path (test_a_step_by_hand)
    assert con.execute("SELECT length_us, events FROM critical_paths WHERE run_id = ?", [run]).fetchall() == [(90.0, 4)]
    # update_actor [20, 95) holds, of the path's edges, the launch delay's [20, 25) (5), gemm's
    # 55 and the step's own [90, 95) (5): 65 us, of its 75 inside the path's span [0, 100), so
    # 10 us waited (the sync's [80, 90)); generate_sequences [0, 10) is the step's first 10 us of CPU
    assert run_query(con, "gpu_stage_critical_path", run_id=run) == [
        (0, "update_actor", "update_actor", 1, 75.0, 65.0, pytest.approx(100 * 65 / 75), pytest.approx(100 * 5 / 65),
         pytest.approx(100 * 55 / 65), 0.0, pytest.approx(100 * 5 / 65), 10.0),
        (0, "generate_sequences", "gen", 1, 10.0, 10.0, 100.0, 100.0, 0.0, 0.0, 0.0, 0.0)]
    # both ranges start inside ProfilerStep#1: a page's window on step 1 keeps them, on rank 1 or step 2 none
    assert len(run_query(con, "gpu_stage_critical_path", run_id=run, rank=0, step=1)) == 2
    assert run_query(con, "gpu_stage_critical_path", run_id=run, step=2) == []
    assert run_query(con, "gpu_stage_time", run_id=run, rank=1) == []
    assert [r[1] for r in run_query(con, "gpu_stage_time", run_id=run, step=1)] == ["update_actor", "generate_sequences"]


def test_a_kernel_queued_behind_another_waits_for_it_not_its_launch(con, tmp_path):
    # relu launched at 22, before gemm started at 25: as HTA draws it, gemm then gets no launch
    # edge (something else was queued on its stream before it started), so the path starts at
    # gemm; relu follows gemm on the stream (a 2 us gap), and the sync waits for relu
    path = _step(tmp_path)
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 22, "dur": 4,
         "args": {"correlation": 3}},
        {"ph": "X", "cat": "kernel", "name": "relu", "pid": 0, "tid": 7, "ts": 82, "dur": 5,
         "args": {"stream": 7, "correlation": 3}}]
    write_json(path, doc)
    run = ingest_paths(con, [path]).run_id
    edges = con.execute("SELECT type, name, dur_us FROM critical_path_edges WHERE run_id = ? AND dur_us > 0 "
                        "ORDER BY seq", [run]).fetchall()
    assert edges == [("operator", "gemm", 55.0), ("kernel_kernel_delay", "gemm", 2.0), ("operator", "relu", 5.0),
                     ("operator", "step", 10.0)]


def test_a_trace_without_cpu_operators_has_no_path(con, shared_data, tmp_path):
    doc = json.loads(gzip.decompress((shared_data / "kineto/critical_path/cuda_event_sync/event_sync_trace.json.gz")
                                     .read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("cpu_op", "cuda_runtime")]
    result = ingest_paths(con, [write_json(tmp_path / "gpu_only.json", doc)])
    # no launch joins its kernels to a window: no path, and no empty row for it
    assert result.rows["gpu_events"] == 5 and "critical_paths" not in result.rows
    assert run_query(con, "gpu_critical_path", run_id=result.run_id) == []


def test_operators_that_overlap_without_nesting_by_hand():
    """A [0, 10) and B [5, 15) on one thread: B's start comes inside A, so HTA's call tree makes B
    A's child, and A's end (at 10) pops B. The walk: A's start, B's start, B's end (15), A's end
    (10). Sums: 5 at B's start, 15 at B's end, and 15 again at A's end (its -5 us edge counts 0:
    a weight of -1 or less does); the first of the two in Kahn's order ends the path."""
    timeline = Timeline()
    timeline.extend([CPU_OP, CPU_OP], ["A", "B"], [1, 1], [1, 1], [0.0, 5.0], [10.0, 10.0], *[[-1, -1]] * 4)
    [path] = critical_paths(timeline)
    assert path.window.name == WHOLE_TRACE and (path.length, path.events, path.span) == (15.0, 2, 15.0)
    assert list(zip(*(path.edges[k].tolist() for k in EDGE_FIELDS))) == [
        (OPERATOR, CPU, "A", "thread 1", 0.0, 5.0), (OPERATOR, CPU, "B", "thread 1", 5.0, 10.0)]

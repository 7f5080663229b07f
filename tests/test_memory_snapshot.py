"""PyTorch CUDA memory snapshots: the sample by hand, the history offset by what was allocated
before recording, and pickles that are not plain data refused without running anything."""
from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import memory_snapshot
from polytrace.ingest.load import ingest_paths
from tests.test_kineto import run_query

MIB = 2**20


def entry(action: str, size: int, time_us: int) -> dict:
    return {"action": action, "addr": 7, "size": size, "stream": 0, "time_us": time_us, "frames": []}


def write(path: Path, snapshot, protocol: int = 4) -> Path:
    path.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    return path


def test_the_sample_sums_by_hand(con, tmp_path):
    path = tmp_path / "snapshot_rank0.pickle"
    path.write_bytes(registry.get("memory-snapshot").sample().files["snapshot_rank0.pickle"])
    assert registry.detect(path).name == "memory-snapshot"
    run = ingest_paths(con, [path]).run_id
    # at the end 1 MiB allocated in 3 MiB of segments; the history reserved 2 MiB and allocated
    # and freed 512 KiB, so 1 MiB allocated and 1 MiB reserved came before recording
    rows = con.execute("SELECT rank, device, ts_us, total_bytes, unknown_bytes, reserved_bytes, activation_bytes "
                       "FROM gpu_memory WHERE run_id = ? ORDER BY ts_us", [run]).fetchall()
    assert rows == [(0, "cuda:0", 1000.0, MIB, MIB, 3 * MIB, None),
                    (0, "cuda:0", 1010.0, MIB + MIB // 2, MIB + MIB // 2, 3 * MIB, None),
                    (0, "cuda:0", 1030.0, MIB, MIB, 3 * MIB, None)]
    [peak] = run_query(con, "gpu_memory_peak", run_id=run)
    assert peak[:5] == (0, "cuda:0", None, MIB + MIB // 2, pytest.approx(0.010)) and peak[11] == 3 * MIB


def test_devices_times_shared_and_a_gzipped_file_with_a_rank(con, tmp_path):
    # device 1 only: two allocations at one time keep the state after both; a free_requested
    # block is still allocated until free_completed
    snapshot = {"segments": [{"device": 1, "total_size": 8 * MIB, "allocated_size": 3 * MIB}],
                "device_traces": [[], [entry("segment_alloc", 8 * MIB, 5), entry("alloc", MIB, 6),
                                       entry("alloc", 2 * MIB, 6), entry("free_requested", MIB, 7),
                                       entry("alloc", MIB, 8), entry("free_completed", MIB, 9)]]}
    path = tmp_path / "snapshot_rank2.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(snapshot)))
    result = ingest_paths(con, [path])
    assert not result.warnings
    rows = con.execute("SELECT rank, device, ts_us, total_bytes, reserved_bytes FROM gpu_memory WHERE run_id = ? "
                       "ORDER BY ts_us", [result.run_id]).fetchall()
    assert rows == [(2, "cuda:1", 5.0, 0, 8 * MIB), (2, "cuda:1", 6.0, 3 * MIB, 8 * MIB),
                    (2, "cuda:1", 8.0, 4 * MIB, 8 * MIB), (2, "cuda:1", 9.0, 3 * MIB, 8 * MIB)]


class _Runs:
    """A pickle that calls os.system when loaded by an unpickler that allows it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _refused(con, path: Path) -> str:
    before = store.runs.count(con)
    with pytest.raises(IngestError) as e:
        ingest_paths(con, [path], format="memory-snapshot")
    assert "\n" not in str(e.value) and store.runs.count(con) == before
    return str(e.value)


def test_a_pickle_with_a_global_is_refused_without_being_run(con, tmp_path):
    marker = tmp_path / "ran"
    evil = {"segments": [], "device_traces": [[entry("alloc", 1, 1)]], "x": _Runs(marker)}
    for protocol in (0, 2, 5):
        said = _refused(con, write(tmp_path / f"evil{protocol}.pickle", evil, protocol))
        assert "names the global posix.system" in said and not marker.exists()
    # a class from the standard library is a global too
    from collections import OrderedDict
    said = _refused(con, write(tmp_path / "ordered.pickle", {"device_traces": [], "segments": OrderedDict()}))
    assert "names the global collections.OrderedDict" in said
    # pickle.loads itself would have run it: the marker shows the test can fail
    pickle.loads((tmp_path / "evil2.pickle").read_bytes())
    assert marker.exists()


def test_bad_snapshots_are_refused_in_one_line(con, tmp_path, monkeypatch):
    good = pickle.dumps({"segments": [], "device_traces": [[entry("alloc", 1, 1)]]})
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(good[:len(good) // 2])
    assert "not a readable pickle" in _refused(con, cut)
    appended = tmp_path / "appended.pickle"
    appended.write_bytes(good + b"\n" * 10)
    assert "10 bytes after the pickle's end" in _refused(con, appended)
    assert "no device_traces list" in _refused(con, write(tmp_path / "list.pickle", [1, 2]))
    old = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 4}]]}
    assert "without time_us" in _refused(con, write(tmp_path / "old.pickle", old))
    bad_size = {"segments": [], "device_traces": [[entry("alloc", "4", 1)]]}
    assert "size is '4', not a 64-bit integer" in _refused(con, write(tmp_path / "size.pickle", bad_size))
    empty = {"segments": [], "device_traces": [[]]}
    assert "no allocation history" in _refused(con, write(tmp_path / "empty.pickle", empty))
    no_stop = tmp_path / "no_stop.pickle"
    no_stop.write_bytes(b"\x80\x02" + b"]" * 200_000 + b"\x8c\x0cdevice_traces")
    assert "not a readable pickle" in _refused(con, no_stop)
    monkeypatch.setattr(memory_snapshot, "MAX_SNAPSHOT_BYTES", len(good) - 1)
    assert "over 0 MiB is not read" in _refused(con, write(tmp_path / "big.pickle", pickle.loads(good)))


"""TensorBoard event files: files written here by tensorboardX's SummaryWriter, ingested whole, in
archives, cut short, corrupted, several per run, and as a bomb; the rows checked by hand."""
from __future__ import annotations

import gzip
import io
import os
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import tensorboard_events as tb
from polytrace.ingest.load import ingest_paths

pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed "
                                           "(pip install 'polytrace[tensorboard]')")

MB = 1 << 20


@pytest.fixture
def con(tmp_path):
    c = store.open(tmp_path / "t.duckdb")
    yield c
    c.close()


def write_run(folder: Path) -> Path:
    """A run as an RL trainer logs it, by tensorboardX: two steps of timings and lengths, a TF2-style
    tensor scalar, a double tensor, a histogram and a text (skipped)."""
    from tensorboardX import SummaryWriter
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto

    w = SummaryWriter(str(folder))
    w.add_scalar("timing/generation", 12.5, 1)
    w.add_scalar("rollout/response_length_mean", 700.0, 1)
    w.add_scalar("timing/generation", 10.0, 2)
    w.add_scalar("policy/kl", 0.1, 2)  # float32: 0.10000000149011612 as float64
    t = TensorProto(dtype=1, tensor_content=struct.pack("<f", 512.0))
    t.tensor_shape.SetInParent()
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    w._get_file_writer().add_summary(Summary(value=[Summary.Value(
        tag="rollout/response_length_mean", tensor=t, metadata=scalars)]), 2)
    t = TensorProto(dtype=2, double_val=[0.25])
    t.tensor_shape.SetInParent()
    w._get_file_writer().add_summary(Summary(value=[Summary.Value(tag="actor/entropy", tensor=t)]), 2)
    w.add_histogram("lengths", [1, 2, 3], 1)
    w.add_text("note", "hello", 1)
    w.close()
    return next(folder.glob("events.out.tfevents.*"))


EXPECTED = [
    (1, "rollout/response_length_mean", 700.0), (1, "timing/generation", 12.5),
    (2, "actor/entropy", 0.25), (2, "policy/kl", 0.10000000149011612),
    (2, "rollout/response_length_mean", 512.0), (2, "timing/generation", 10.0),
]


def metrics(con, run_id: str) -> list[tuple]:
    return con.execute("SELECT step, key, value FROM step_metrics WHERE run_id = ? ORDER BY step, key",
                       [run_id]).fetchall()


def test_tensorboardx_file_golden(con, tmp_path):
    path = write_run(tmp_path / "run")
    assert registry.detect(path).name == "tensorboard"
    result = ingest_paths(con, [tmp_path / "run"])
    assert result.format == "tensorboard"
    assert metrics(con, result.run_id) == EXPECTED
    assert result.warnings == ["summary values that are not scalars skipped: 1 histo, 1 tensor"]


@pytest.mark.parametrize("container", ["tar.gz", "zip", "gz"])
def test_the_same_file_in_an_archive_or_gzip(con, tmp_path, container):
    path = write_run(tmp_path / "run")
    data, member = path.read_bytes(), f"logs/tensorboard/{path.name}"
    out = tmp_path / f"run.{container}"
    if container == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(member, data)
    elif container == "tar.gz":
        with tarfile.open(out, "w:gz") as tar:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    else:
        out = tmp_path / f"{path.name}.gz"
        out.write_bytes(gzip.compress(data))
    result = ingest_paths(con, [out])
    assert result.format == "tensorboard"
    assert metrics(con, result.run_id) == EXPECTED


def test_a_file_cut_inside_its_last_record(con, tmp_path):
    path = write_run(tmp_path / "run")
    data = path.read_bytes()
    cut = tmp_path / path.name
    cut.write_bytes(data[:-7])  # the text event, cut: everything before it is read
    result = ingest_paths(con, [cut])
    assert metrics(con, result.run_id) == EXPECTED
    assert any(w.startswith("the file ends inside a record at byte ") for w in result.warnings)


def test_a_payload_checksum_skips_that_record_and_a_header_checksum_is_refused(tmp_path):
    events = [tb.event(1.0, file_version="brain.Event:2")] + [
        tb.event(1.0 + s, s, values=[tb.simple_value("loss", float(s))]) for s in (1, 2, 3)]
    records = [tb.record(e) for e in events]
    bad_payload = bytearray(records[2])
    bad_payload[-6] ^= 0xFF  # inside step 2's payload
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(records[0] + records[1] + bytes(bad_payload) + records[3])
    parsed = tb.parse(path)
    assert [(r["step"], r["value"]) for r in parsed.deferred.to_pylist()] == [(1, 1.0), (3, 3.0)]
    at = len(records[0]) + len(records[1])
    assert parsed.warnings == [f"1 record(s) failing their checksum skipped (the first at byte {at})"]
    bad_header = bytearray(records[3])
    bad_header[0] ^= 0x01    # step 3's length
    path.write_bytes(records[0] + records[1] + records[2] + bytes(bad_header))
    with pytest.raises(IngestError, match=f"corrupt record header at byte {at + len(records[2])} "):
        tb.parse(path)


def test_a_file_that_is_not_tensorboard(con, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(4096))
    assert registry.detect(path) is None
    with pytest.raises(IngestError) as e:
        ingest_paths(con, [path], format="tensorboard")
    assert str(e.value).startswith("model.bin: not a TensorBoard event file (the record at byte 0 fails")
    assert "\n" not in str(e.value)


def test_several_files_of_one_run_keep_the_latest_step(con, tmp_path):
    # a run restarted from step 2: the second file logs step 2 again, later by wall time
    first = [tb.event(100.0, file_version="brain.Event:2"),
             tb.event(101.0, 1, values=[tb.simple_value("loss", 1.0)]),
             tb.event(102.0, 2, values=[tb.simple_value("loss", 2.0), tb.simple_value("kl", 0.5)])]
    second = [tb.event(200.0, file_version="brain.Event:2"),
              tb.event(201.0, 2, values=[tb.simple_value("loss", 20.0)]),
              tb.event(202.0, 3, values=[tb.simple_value("loss", 30.0)])]
    folder = tmp_path / "run"
    folder.mkdir()
    # named so that the older file sorts last: the wall time decides, not the order
    (folder / "events.out.tfevents.2.b").write_bytes(b"".join(map(tb.record, first)))
    (folder / "events.out.tfevents.1.a").write_bytes(b"".join(map(tb.record, second)))
    result = ingest_paths(con, [folder])
    assert metrics(con, result.run_id) == [(1, "loss", 1.0), (2, "kl", 0.5), (2, "loss", 20.0),
                                           (3, "loss", 30.0)]
    assert result.warnings == ["1 scalar(s) at 1 step(s) logged by more than one event file (several "
                               "ranks, or a restart): the step logged latest kept: step(s) 2"]


def test_the_sample_is_what_the_protobuf_classes_decode():
    from tensorboardX.proto.event_pb2 import Event

    data = tb.sample().files["events.out.tfevents.1700000000.host.1.0"]
    path_rows = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        path_rows.append(Event.FromString(data[pos + 12:pos + 12 + length]))
        pos += 16 + length
    assert path_rows[0].file_version == "brain.Event:2"
    assert (path_rows[1].step, path_rows[1].summary.value[0].tag, path_rows[1].summary.value[0].simple_value) \
        == (1, "timing/generation", 12.5)
    tensor = path_rows[2].summary.value[1]
    assert tensor.metadata.plugin_data.plugin_name == "scalars"
    assert struct.unpack("<f", tensor.tensor.tensor_content) == (512.0,)


def test_steals_no_other_format_and_is_stolen_by_none():
    ours = tb.sample().files
    for fmt in registry.FORMATS:
        if fmt.name == "tensorboard":
            continue
        for name, data in fmt.sample().files.items():
            assert not tb.sniff(data[:65536], Path(name).name), (fmt.name, name)
        for name, data in ours.items():
            assert not fmt.sniff(data, name), fmt.name


def test_a_forged_record_length_is_skipped_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(tb, "MAX_RECORD_BYTES", 1024)
    first = tb.record(tb.event(1.0, 1, values=[tb.simple_value("loss", 1.0)]))
    length = struct.pack("<Q", 1 << 40)
    forged = length + struct.pack("<I", tb.masked(tb.crc32c(length)))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(first + forged + b"\0" * 5000)
    parsed = tb.parse(path)
    assert parsed.deferred.num_rows == 1
    assert parsed.warnings == ["1 record(s) longer than 0 MB skipped unread",
                               f"the file ends inside a record at byte {len(first)} (a run still writing, "
                               "or killed): read up to it"]


def bomb(path: Path, inflated: int) -> None:
    """A gzip of `inflated` bytes of valid scalar events: 200 steps x 50 tags over and over, so it
    compresses like a bomb and every value is a (step, tag) already seen."""
    chunk = b"".join(tb.record(tb.event(1.0 + s, s, values=[tb.simple_value(f"m/{k}", k * 0.5)
                                                            for k in range(50)])) for s in range(1, 201))
    chunk = chunk * (16 * MB // len(chunk))
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(tb.record(tb.event(0.0, file_version="brain.Event:2")))
        for _ in range(inflated // len(chunk)):
            f.write(chunk)


def test_a_bomb_of_valid_records_stays_in_bounded_memory(tmp_path):
    from tests.test_ingest_streaming import BASELINE_MB, peak_tree_rss

    path = tmp_path / "events.out.tfevents.1.host.gz"
    bomb(path, 200 * MB)
    assert path.stat().st_size < 200 * MB / 30
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    env["POLYTRACE_MAX_INFLATE_BYTES"] = str(96 * MB)
    peak, out = peak_tree_rss([str(path), str(tmp_path / "t.duckdb")], env)
    assert out == ("refused events.out.tfevents.1.host.gz: gzip inflates past 100663296 bytes "
                   "(limit POLYTRACE_MAX_INFLATE_BYTES)")
    print(f"\nTensorBoard bomb: peak RSS of the process tree {peak:.0f} MB")
    assert peak < BASELINE_MB + 262, f"peak RSS {peak:.0f} MB"


def test_without_the_extra_detection_works_and_parse_names_the_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboardX.proto.event_pb2", None)  # as if not installed
    ((name, data),) = tb.sample().files.items()
    path = tmp_path / name
    path.write_bytes(data)
    assert registry.detect(path).name == "tensorboard"
    with pytest.raises(IngestError) as e:
        tb.parse(path)
    assert str(e.value) == (f"{name}: reading TensorBoard event files needs the tensorboard extra: "
                            "pip install 'polytrace[tensorboard]'")

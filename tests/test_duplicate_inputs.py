"""An input whose bytes an earlier input of the same ingest has is read once, and said so."""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import httpx

from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from tests.corpus.seeds import zip_of
from tests.test_spine import PACKED

STEP_FILE = "packed_lengths_step_0.jsonl"


def recorded_twice(root: Path) -> Path:
    """A run folder holding the same step file in two recordings, a/ and b/."""
    for recording in ("a", "b"):
        (root / recording).mkdir(parents=True)
        (root / recording / STEP_FILE).write_text(PACKED)
    return root


def samples_per_step(con, run_id: str) -> Counter:
    return Counter(dict(con.execute("SELECT step, count(*) FROM samples WHERE run_id = ? GROUP BY step",
                                    [run_id]).fetchall()))


def test_a_file_recorded_twice_is_read_once_and_said(con, tmp_path):
    run = recorded_twice(tmp_path / "run")
    result = ingest_paths(con, [run])
    # PACKED: 2 prompts of 2 samples, once
    assert result.rows["samples"] == 4
    assert result.warnings == [f"{run}/b/{STEP_FILE} has the same bytes as {run}/a/{STEP_FILE}: read once"]
    # the run is its distinct content: the one file alone is the same run
    alone = ingest_paths(con, [run / "a"])
    assert alone.existing and alone.run_id == result.run_id


def test_the_cli_prints_the_repeat(tmp_path, db_path, capsys):
    run = recorded_twice(tmp_path / "run")
    assert main(["ingest", str(run), "--db", str(db_path)]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"warning: {run}/b/{STEP_FILE} has the same bytes as {run}/a/{STEP_FILE}: read once",
        "ingested polytrace-packed: samples=4"]


def test_an_archive_member_with_a_files_bytes_is_read_once(con, tmp_path):
    (tmp_path / STEP_FILE).write_text(PACKED)
    (tmp_path / "copy.zip").write_bytes(zip_of({f"run/{STEP_FILE}": PACKED.encode()}))
    result = ingest_paths(con, [tmp_path / STEP_FILE, tmp_path / "copy.zip"])
    assert result.rows["samples"] == 4
    assert result.warnings == [f"{tmp_path}/copy.zip!run/{STEP_FILE} has the same bytes as "
                               f"{tmp_path}/{STEP_FILE}: read once"]


def test_an_upload_returns_the_repeat_in_its_warnings(make_server):
    srv = make_server()
    files = [(f"run/{recording}/{STEP_FILE}", PACKED.encode()) for recording in ("a", "b")]
    body = httpx.post(f"{srv.url}/api/runs", files=[("file", f) for f in files], timeout=60).json()
    assert body["ok"] and body["rows"]["samples"] == 4, body
    assert body["warnings"] == [f"run/b/{STEP_FILE} has the same bytes as run/a/{STEP_FILE}: read once"]


def test_the_verl_folder_of_two_recordings_counts_each_content_once(con, shared_data):
    verl = shared_data / "polytrace" / "verl"
    recordings = verl / "profile" / "packed_length_log"
    later, earlier = recordings / "20260614_023133", recordings / "20260610_092349"
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(verl.rglob("*")) if f.is_file()}
    in_later = {digests[f]: f for f in sorted(later.iterdir())}
    distinct_earlier = [f for f in sorted(earlier.iterdir()) if digests[f] not in in_later]
    assert distinct_earlier and len(distinct_earlier) < len(list(earlier.iterdir()))

    expected = samples_per_step(con, ingest_paths(con, [later]).run_id)
    expected += samples_per_step(con, ingest_paths(con, distinct_earlier).run_id)
    result = ingest_paths(con, [verl])
    assert samples_per_step(con, result.run_id) == expected
    assert result.rows["samples"] == expected.total()

    # the walk takes 20260610_092349 first, so each repeat is a file of 20260614_023133
    repeats = [f"{in_later[digests[f]]} has the same bytes as {f}: read once"
               for f in sorted(earlier.iterdir()) if digests[f] in in_later]
    assert repeats and result.warnings == repeats


def test_two_recordings_that_disagree_on_a_step_are_said(con, tmp_path):
    """Two logs sharing step 2 with different values (a resumed run's two logs): one warning names
    the step; the same values in two formats say nothing."""
    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.jsonl"
    a.write_text("step:1 - timing_s/gen:1.0 - timing_s/step:2.0\nstep:2 - timing_s/gen:3.0 - timing_s/step:4.0\n")
    b.write_text("step:2 - timing_s/gen:5.0 - timing_s/step:6.0\nstep:3 - timing_s/gen:1.0 - timing_s/step:2.0\n")
    c.write_text('{"step": 2, "data": {"timing_s/gen": 3.0}}\n')
    disagree = ingest_paths(con, [a, b])
    assert [w for w in disagree.warnings if "recorded more than once" in w] == [
        "1 step(s) recorded more than once with different values: 2 (a resumed run, or two runs' files "
        "together?); each figure reads one of the recordings"]
    agree = ingest_paths(con, [a, c])
    assert not [w for w in agree.warnings if "recorded more than once" in w]

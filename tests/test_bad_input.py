"""Bad input through the CLI: one `error:` line, non-zero exit, no data change, one `failed` ingest row."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from polytrace.store.runs import data_tables

GOOD = (
    '{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 10, "output": [1, 3], "n_sampling": 2, "validate": false}\n'
    '{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "local_index": 0, "input": 20, "output": [5, 7], "n_sampling": 2, "validate": false}\n'
)
LINE = GOOD.splitlines()[0]


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "polytrace", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def snapshot(db) -> dict:
    con = store.open(db)
    try:
        return {
            "counts": {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in data_tables(con)},
            "runs": con.execute("SELECT * FROM runs ORDER BY run_id").fetchall(),
            "failed": con.execute("SELECT count(*) FROM ingests WHERE status = 'failed'").fetchone()[0],
            "ingests": con.execute("SELECT count(*) FROM ingests").fetchone()[0],
        }
    finally:
        con.close()


@pytest.fixture
def db(tmp_path):
    """A database that already holds one good run, so an untouched table is a non-trivial claim."""
    path = tmp_path / "pt.duckdb"
    good = tmp_path / "good" / "packed_lengths_step_0.jsonl"
    good.parent.mkdir()
    good.write_text(GOOD)
    con = store.open(path)
    ingest_paths(con, [good])
    con.close()
    return path


def packed(tmp_path, body: bytes | str, name="packed_lengths_step_1.jsonl"):
    path = tmp_path / name
    path.write_bytes(body.encode() if isinstance(body, str) else body)
    return path


def gzip_of(tmp_path, raw: bytes, name: str):
    path = tmp_path / name
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(raw)
    return path


def newline_bomb(tmp_path) -> Path:
    """A verl log's step line, then 1 GiB of newlines in about 1 MB: under the inflate limit,
    but a bomb by its ratio (it held the only writer 218 s when parsed to the limit)."""
    path = tmp_path / "output.log.gz"
    member = gzip.compress(b"\n" * (16 << 20), mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(b"step:1 - timing_s/step:1.0\n", mtime=0))
        f.writelines(member for _ in range(64))
    return path


def broken_deflate() -> bytes:
    data = bytearray(gzip.compress(GOOD.encode() * 50, mtime=0))
    data[20:24] = b"\xff\xff\xff\xff"  # first bytes of the deflate stream, past the 10-byte header
    return bytes(data)


# (case, make(tmp_path) -> (paths, extra args, env), substring of the one error line)
CASES = [
    ("truncated JSON line",
     lambda t: ([packed(t, GOOD + LINE[:40])], [], {}), "Input data was truncated"),
    ("empty file",
     lambda t: ([packed(t, "")], [], {}), "packed_lengths_step_1.jsonl: empty file"),
    ("empty file, forced format",
     lambda t: ([packed(t, "\n \n")], ["--format", "polytrace-packed"], {}), "empty file"),
    ("wrong type",
     lambda t: ([packed(t, LINE.replace('"output": [1, 3]', '"output": "abc"'))], [], {}),
     "record 1: Expected `array`, got `str` - at `$.output`"),
    ("negative length",
     lambda t: ([packed(t, GOOD + LINE.replace('"output": [1, 3]', '"output": [1, -3]'))], [], {}),
     "record 3: Expected `int` >= 0 - at `$.output[1]`"),
    ("multi-turn negative turn tokens",
     lambda t: ([packed(t, '{"step": 0, "prompt_group_id": 0, "sample_id": 0, "final_response_len": 5, '
                           '"turns": [{"turn": 0, "completion_tokens": -5}]}\n',
                        name="multiturn_workload_step_0.jsonl")], [], {}),
     "record 1: Expected `int` >= 0 - at `$.turns[0].completion_tokens`"),
    ("2025 JSON wrong type",
     lambda t: ([packed(t, '{"0": {"input": [1], "output": "abc"}}', name="old.json")], [], {}),
     "old.json: Expected `array`, got `str`"),
    ("unknown format",
     lambda t: ([packed(t, "hello, world\n", name="notes.txt")], [], {}),
     "notes.txt: unknown format (try --format; known: polytrace-packed, "),
    ("a .jsonl that is not JSON",
     lambda t: ([packed(t, "not json at all\n", name="packed_lengths_step_0.jsonl")], [], {}),
     "packed_lengths_step_0.jsonl: not JSON: a .json or .jsonl file must start with '{' or '['"),
    ("unknown --format name",
     lambda t: ([packed(t, GOOD)], ["--format", "nope"], {}), "unknown format 'nope'"),
    ("directory with no recognised file",
     lambda t: ([(t / "d").mkdir() or packed(t / "d", "just notes\n", name="README.txt").parent], [], {}),
     "no recognised trace file"),
    ("non-UTF-8 file",
     lambda t: ([packed(t, LINE.encode()[:-1] + b', "note": "caf\xe9"}\n')], [], {}), "not UTF-8 text"),
    ("gzip past the inflate limit",
     lambda t: ([gzip_of(t, GOOD.encode() * 2000, "packed_lengths_step_1.jsonl.gz")], [],
                {"POLYTRACE_MAX_INFLATE_BYTES": "100000"}), "gzip inflates past 100000 bytes"),
    # 64 MiB of zeros squeezed into ~64 KiB: a real bomb, stopped long before it is inflated
    ("gzip bomb of zeros",
     lambda t: ([gzip_of(t, bytes(64 << 20), "bomb.jsonl.gz")], ["--format", "polytrace-packed"],
                {"POLYTRACE_MAX_INFLATE_BYTES": str(1 << 20)}), "gzip inflates past 1048576 bytes"),
    ("gzip that inflates 500 times",
     lambda t: ([newline_bomb(t)], [], {}), "gzip inflates more than 500 times (64 MiB from "),
    ("corrupt gzip",
     lambda t: ([packed(t, gzip.compress(GOOD.encode())[:-12], name="packed_lengths_step_1.jsonl.gz")],
                [], {}), "corrupt or truncated gzip"),
    # garbage inside the deflate stream fails in zlib itself, not in gzip's CRC check
    ("gzip with a broken deflate stream",
     lambda t: ([packed(t, broken_deflate(), name="packed_lengths_step_1.jsonl.gz")], [], {}),
     "corrupt or truncated gzip (Error -3 while decompressing data"),
    ("no such path",
     lambda t: ([t / "missing.jsonl"], [], {}), "missing.jsonl: no such file or directory"),
    # it named the whole first JSON line as the unknown column
    ("a JSON file forced as a samples table",
     lambda t: ([packed(t, GOOD)], ["--format", "samples-table", "--force"], {}),
     "packed_lengths_step_1.jsonl: a samples table is CSV or Parquet, and this file is JSON"),
    # it said "[Errno 20] Not a directory" with the upload's temporary path
    ("a file forced as a Parquet lake",
     lambda t: ([packed(t, GOOD)], ["--format", "parquet-lake", "--force"], {}),
     "packed_lengths_step_1.jsonl: a Parquet lake is a directory (table=<name>/run_id=<id>/part-0.parquet), "
     "not a file"),
    # a name's escape sequences (clear the screen) and newline are escaped, not sent to the terminal
    ("a name with control characters",
     lambda t: ([packed(t, "just notes\n", name="x\x1b[2J\nsecond.jsonl")], ["--format", "polytrace-packed"], {}),
     "x\\x1b[2J\\nsecond.jsonl: "),
]


@pytest.mark.parametrize("make, reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_leaves_one_line_and_one_failed_row(db, tmp_path, make, reason):
    paths, extra, env = make(tmp_path)
    before = snapshot(db)
    out = cli("ingest", *map(str, paths), "--db", str(db), *extra, env=env)
    assert out.returncode != 0
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in out.stderr and "\x1b" not in out.stderr
    assert reason in lines[0]
    assert out.stdout == ""
    after = snapshot(db)
    assert after["counts"] == before["counts"] and after["runs"] == before["runs"]
    assert after["failed"] == before["failed"] + 1
    assert after["ingests"] == before["ingests"] + 1


def test_gzip_within_the_limit_is_read_transparently(db, tmp_path):
    path = gzip_of(tmp_path, GOOD.replace('"step": 0', '"step": 1').encode(), "packed_lengths_step_1.jsonl.gz")
    out = cli("ingest", str(path), "--db", str(db), env={"POLYTRACE_MAX_INFLATE_BYTES": "100000"})
    assert out.returncode == 0, out.stderr
    con = store.open(db)
    try:
        n = con.execute("SELECT count(*) FROM samples WHERE run_id = ? AND step = 1",
                        [out.stdout.splitlines()[-1]]).fetchone()[0]
    finally:
        con.close()
    assert n == 4


def test_same_content_twice_is_the_same_run_and_force_makes_a_new_one(db, tmp_path):
    path = packed(tmp_path, GOOD.replace('"step": 0', '"step": 2'))
    first = cli("ingest", str(path), "--db", str(db))
    again = cli("ingest", str(path), "--db", str(db), "--name", "other name")
    assert first.returncode == again.returncode == 0
    run_id = first.stdout.splitlines()[-1]
    assert again.stdout.splitlines()[-1] == run_id
    assert "already ingested" in again.stderr
    before = snapshot(db)
    forced = cli("ingest", str(path), "--db", str(db), "--force")
    assert forced.returncode == 0, forced.stderr
    new_id = forced.stdout.splitlines()[-1]
    assert new_id != run_id
    after = snapshot(db)
    assert len(after["runs"]) == len(before["runs"]) + 1
    assert after["counts"]["samples"] == before["counts"]["samples"] + 4


def test_the_caller_names_the_inputs_and_words_the_hint(db, tmp_path):
    """The API ingests uploads from temporary paths: the error and the log use the client's names,
    and the hint names the form field where the CLI names its flag."""
    upload = tmp_path / "polytrace-upload-x1" / "files"
    upload.mkdir(parents=True)
    (upload / "notes.txt").write_text("hello, world\n")
    (upload / "more.txt").write_text("more\n")
    field = lambda option: f"the {option!r} form field"  # noqa: E731
    con = store.open(db)
    try:
        with pytest.raises(IngestError) as single:
            ingest_paths(con, [upload / "notes.txt"], names={upload / "notes.txt": "docs/notes.txt"},
                         option_words=field)
        with pytest.raises(IngestError) as several:
            ingest_paths(con, [upload], names={upload: "docs"}, option_words=field)
        log = con.execute("SELECT file_name, error FROM ingests WHERE status = 'failed' "
                          "ORDER BY ingest_id").fetchall()
    finally:
        con.close()
    e = single.value
    assert (e.path, e.reason, e.hint.option, e.unrecognised) == (
        "notes.txt", "unknown format", "format", True)
    assert str(e).startswith("notes.txt: unknown format (try --format; known: polytrace-packed, ")
    assert e.worded(field).startswith("notes.txt: unknown format (try the 'format' form field; known: ")
    assert several.value.worded(field).startswith(
        "docs: no recognised trace file (try the 'format' form field")
    # a failed row per path given, named as the caller named it, with the error as the caller words it
    assert log == [("docs/notes.txt", e.worded(field)), ("docs", several.value.worded(field))]

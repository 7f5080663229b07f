"""Every format reads its input a batch at a time: small batches parse like one batch, and a gzip
that inflates to gigabytes is ingested (or refused by the inflate limit) in bounded memory."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path, PurePath

import psutil
import pytest

from polytrace.ingest import registry, sources, trace_events
from polytrace.ingest.contract import IngestError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def inputs() -> list[tuple[str, Path]]:
    """(format, file) for every single-file fixture of a format parsed here, and each format's sample."""
    named = [
        ("polytrace-packed", "formats/dapo/packed_lengths_step_0.jsonl"),
        ("polytrace-filter", "formats/dapo/dapo_filter_indices.jsonl"),
        ("polytrace-multiturn", "formats/multiturn_workload_step_7.jsonl"),
        ("polytrace-reward-timings", "formats/reward_timings_step_3.jsonl"),
        ("polytrace-2025", "formats/polytrace_2025_flat.json"),
        ("polytrace-2025", "formats/polytrace_2025_nested.json"),
        ("polytrace-2025", "formats/polytrace_2025_multiturn.json"),
        ("samples-table", "formats/samples.csv"),
        ("verl-console", "verl/quirks.log"),
        ("verl-console", "verl/keys.log"),
        ("verl-jsonl", "verl/metrics.jsonl"),
        ("wandb-csv", "verl/history.csv"),
        ("kineto", "kineto/mtia_rank0.json"),
    ]
    return [(fmt, FIXTURES / rel) for fmt, rel in named]


def parsed_rows(fmt: str, path: Path) -> tuple:
    parsed = registry.get(fmt).parse(path)
    tables = {name: repr(t.to_pylist()) for name, t in parsed.tables.items()}
    deferred = repr(parsed.deferred.to_pylist()) if parsed.deferred is not None else None
    return tables, deferred, parsed.run, parsed.warnings


@pytest.mark.parametrize(("fmt", "path"), inputs(), ids=lambda v: getattr(v, "name", v))
def test_small_batches_parse_like_one_batch(fmt, path, monkeypatch, tmp_path):
    # the default batch holds each of these files whole; 61-byte batches cut every line,
    # member and CSV row apart (61: not a power of two, so cuts fall everywhere)
    whole = parsed_rows(fmt, path)
    monkeypatch.setattr(sources, "BATCH_BYTES", 61)
    monkeypatch.setattr(trace_events, "BLOCK_BYTES", 61)
    assert parsed_rows(fmt, path) == whole
    zipped = tmp_path / path.name  # gzip is known by its magic bytes; the same name, the same rows
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert parsed_rows(fmt, zipped) == whole


def test_members_of_a_document_keep_json_semantics(tmp_path):
    # a key given twice keeps its later value; strings hold brackets and quotes; whitespace anywhere
    path = tmp_path / "old.json"
    path.write_text(' {"1" : {"input": [1], "output": [2]},\n "0": {"input": [5], "output": [[6, 7]],'
                    ' "note": "a ] } \\" ,"},\n"1": {"input": [3], "output": [4]} } \n')
    samples = registry.get("polytrace-2025").parse(path).tables["samples"]
    assert [(r["step"], r["prompt_len"], r["response_len"]) for r in samples.to_pylist()] == [
        (0, 5, 6), (0, 5, 7), (1, 3, 4)]


@pytest.mark.parametrize(("text", "error"), [
    ('{"0": {"input": [1], "output": [2]}', "Input data was truncated"),
    ('{"0": {"input": [1], "output": [2]}} []', "trailing characters"),
    ('{"0" {"input": [1]}}', "JSON is malformed (byte 5)"),
    ('{"0": {"input": [1], "output": [2]},}', "JSON is malformed"),
    ('[{"input": [1]}]', "not a JSON object"),
    ('{"0": {"input": "x"}}', "Expected `array`, got `str`"),
    ("  \n", "empty file"),
])
def test_bad_documents_are_one_line_errors(tmp_path, monkeypatch, text, error):
    path = tmp_path / "old.json"
    path.write_text(text)
    for batch in (sources.BATCH_BYTES, 3):
        monkeypatch.setattr(sources, "BATCH_BYTES", batch)
        with pytest.raises(IngestError, match=re.escape(error)):
            registry.get("polytrace-2025").parse(path)


def test_errors_name_the_record_and_byte_of_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BATCH_BYTES", 100)
    line = '{"step": 0, "input": 10, "output": [1, 3]}\n'
    path = tmp_path / "packed_lengths_step_0.jsonl"
    path.write_text(line * 7 + line.replace("[1, 3]", "[1, -3]"))
    with pytest.raises(IngestError, match=r"record 8: Expected `int` >= 0 - at `\$.output\[1\]`"):
        registry.get("polytrace-packed").parse(path)
    path.write_bytes((line * 7).encode() + b'{"step": 0, "input": \xff}\n')
    with pytest.raises(IngestError, match=f"not UTF-8 text \\(byte {len(line) * 7 + 21}\\)"):
        registry.get("polytrace-packed").parse(path)
    # broken JSON: the line an editor goes to, blank lines counted, in a batch after the first
    path.write_text(line * 4 + "\n" + line * 2 + '{"step": 0, 1: 2}\n' + line)
    with pytest.raises(IngestError, match=r"object keys must be strings \(line 8, byte "
                                          f"{len(line) * 6 + 1 + 12}\\)"):
        registry.get("polytrace-packed").parse(path)


# --- a gzip that inflates to gigabytes ------------------------------------------------------

MB = 1 << 20


def multi_member_gzip(path: Path, chunk: bytes, inflated: int) -> int:
    """A gzip of `chunk` repeated until `inflated` bytes: one member compressed once and
    written again and again (gzip readers join members), so that making it takes a second."""
    member = gzip.compress(chunk, compresslevel=6, mtime=0)
    copies = -(-inflated // len(chunk))
    with open(path, "wb") as f:
        f.writelines(member for _ in range(copies))
    return copies * len(chunk)


def verl_chunk() -> bytes:
    """16 MiB of a verl console log: mostly worker noise, and one step line per 100 lines over
    500 steps, each logged many times (a resumed run re-logs its steps)."""
    noise = [f"(WorkerDict pid={1000 + i}) INFO rollout worker {i}: generated batch, cache hit rate 0.{i:02d}"
             for i in range(99)]
    out, step = [], 0
    while sum(map(len, out)) < 16 * MB:
        metrics = " - ".join(f"timing_s/stage{k}:{(step * 7 + k) % 97 / 10}" for k in range(30))
        out.append(f"step:{step % 500 + 1} - {metrics} - response_length/mean:np.float64(512.5)\n")
        out.extend(line + "\n" for line in noise)
        step += 1
    return "".join(out).encode()


def packed_chunk() -> bytes:
    """16 MiB of packed_lengths lines shaped like the shared DAPO run's (8 outputs per prompt),
    cycling through 64 prompts so that it compresses like a bomb."""
    lines = [json.dumps({"step": 0, "rank": i % 8, "dp_rank": i % 2, "tp_rank": i % 4,
                         "local_index": i, "input": 100 + i * 13,
                         "output": [(i * 37 + j * 101) % 3000 for j in range(8)],
                         "n_sampling": 8, "validate": False}) + "\n" for i in range(64)]
    block = "".join(lines).encode()
    return block * (16 * MB // len(block))


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from polytrace import settings, store
    from polytrace.ingest.contract import IngestError
    from polytrace.ingest.load import ingest_paths
    from polytrace.ingest.options import IngestOptions, applied
    con = store.open(Path(sys.argv[2]))
    con.execute("SET memory_limit = '256MB'")  # DuckDB's own cache, bounded as a server would set it
    try:
        with applied(IngestOptions.of(settings.get())):  # the inflate limit, as the CLI passes it down
            result = ingest_paths(con, [Path(sys.argv[1])])
        print("ok", sum(result.rows.values()))
    except IngestError as e:
        print("refused", e)
""")


def peak_tree_rss(args: list[str], env: dict) -> tuple[float, str]:
    """Run a child; the peak RSS (MB) of it and all its descendants, sampled every 20 ms."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    parent, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    return peak / MB, out.strip()


BASELINE_MB = 250  # an interpreter with pyarrow, numpy, msgspec and DuckDB imported, and a fresh database


@pytest.mark.parametrize(("name", "chunk", "limit", "expect", "bound_mb"), [
    # ~1.5 GB of log lines: ingested; the result is 500 steps x 31 metrics
    ("output.log.gz", verl_chunk, None, "ok 15500", BASELINE_MB + 150),
    # ~1.2 GB of packed lines, past a 512 MiB limit: refused with the limit's one line once
    # 512 MiB have streamed by; memory is the batch plus the compact Arrow rows parsed so far
    ("packed_lengths_step_0.jsonl.gz", packed_chunk, 512 * MB,
     ("refused packed_lengths_step_0.jsonl.gz: gzip inflates past 536870912 bytes "
      "(limit POLYTRACE_MAX_INFLATE_BYTES)"), BASELINE_MB + 1100),
])
def test_gigabytes_of_inflated_lines_in_bounded_memory(tmp_path, name, chunk, limit, expect, bound_mb):
    import os

    path = tmp_path / name
    inflated = multi_member_gzip(path, chunk(), (1500 if limit is None else 1200) * MB)
    assert path.stat().st_size < inflated / 50
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    if limit:
        env["POLYTRACE_MAX_INFLATE_BYTES"] = str(limit)
    peak, out = peak_tree_rss([str(path), str(tmp_path / "t.duckdb")], env)
    assert out == expect
    # reading the file whole took more than the inflated size (1.2-1.5 GB) before parsing began
    print(f"\n{name}: {inflated / 1e9:.2f} GB inflated, peak RSS of the process tree {peak:.0f} MB")
    assert peak < bound_mb, f"peak RSS {peak:.0f} MB"


def test_a_character_cut_by_a_batch_is_still_utf8(tmp_path, monkeypatch):
    path = tmp_path / "old.json"
    path.write_text('{"0": {"input": [1], "output": [2], "note": "' + "é" * 50 + '"}}', encoding="utf-8")
    monkeypatch.setattr(sources, "BATCH_BYTES", 7)  # odd: cuts two-byte characters in two
    assert registry.get("polytrace-2025").parse(path).tables["samples"].num_rows == 1
    path.write_bytes(path.read_bytes().replace("é".encode(), b"\xff", 1))
    with pytest.raises(IngestError, match=r"not UTF-8 text \(byte 45\)"):
        registry.get("polytrace-2025").parse(path)


def test_a_ray_timeline_bomb_is_refused_in_bounded_memory(tmp_path):
    """300 MiB of task spans in a ~1 MB gzip (the reader held ~8.7x the inflated size when it read
    the file whole): streamed, and refused once it holds more spans than Ray ever keeps."""
    import os

    span = json.dumps({"cat": "task::WorkerDict.actor_rollout_generate_sequences", "ph": "X",
                       "name": "actor_rollout_generate_sequences", "pid": "10.0.0.1",
                       "tid": "worker:" + "ab" * 28, "ts": 1000.0, "dur": 5.0, "args": {"task_id": "01"}})
    block = ((span + ",") * (MB // (len(span) + 1))).encode()
    path = tmp_path / "timeline.json.gz"
    copies = 300 * MB // len(block)
    member = gzip.compress(block, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(b"[", mtime=0))
        f.writelines(member for _ in range(copies))
        f.write(gzip.compress(span.encode() + b"]", mtime=0))
    assert path.stat().st_size < 4 * MB
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    peak, out = peak_tree_rss([str(path), str(tmp_path / "t.duckdb")], env)
    assert out == ("refused timeline.json.gz: more than 1,000,000 task spans: more than ten times what Ray "
                   "keeps (100,000 task events by default), not a Ray timeline")
    print(f"\nRay timeline bomb: {copies * len(block) / 1e6:.0f} MB inflated, peak RSS of the process tree {peak:.0f} MB")
    assert peak < BASELINE_MB + 262, f"peak RSS {peak:.0f} MB"


def test_a_wandb_log_whose_record_never_ends_is_refused_in_bounded_memory(tmp_path):
    """A 300 MiB W&B record log whose one record never ends (a FIRST piece, then MIDDLE pieces):
    read a block at a time and refused at 64 MiB of record, not read whole. (Its gzip would be
    refused sooner, as a compression bomb: tests/test_bad_input.py.)"""
    import os
    import zlib

    from polytrace.ingest.formats import wandb_offline as w

    def piece(kind: int, payload: bytes) -> bytes:
        return w.PIECE.pack(zlib.crc32(payload, zlib.crc32(bytes([kind]))), len(payload), kind) + payload

    first = w.HEADER.pack(w.IDENT, w.MAGIC, w.VERSION) + piece(w.FIRST, b"\x12" * (w.BLOCK - 14))
    middle = piece(w.MIDDLE, b"\x12" * (w.BLOCK - 7))
    blocks = middle * 32  # 1 MiB
    path = tmp_path / "run-bomb.wandb"
    with open(path, "wb") as f:
        f.write(first)
        f.writelines(blocks for _ in range(300))
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    peak, out = peak_tree_rss([str(path), str(tmp_path / "t.duckdb")], env)
    assert out.startswith("refused run-bomb.wandb: a record of more than 64 MiB at byte ")
    print(f"\nW&B log of one endless record: 300 MiB, peak RSS of the process tree {peak:.0f} MB")
    assert peak < BASELINE_MB + 262, f"peak RSS {peak:.0f} MB"


def _format_names() -> list[str]:
    from polytrace.ingest import registry

    return [f.name for f in registry.FORMATS if not f.claims_directory]


@pytest.mark.parametrize("fmt", _format_names())
def test_every_formats_gzip_bomb_is_refused_in_bounded_memory(tmp_path, fmt):
    """Each format's own sample file, then 1 GiB of newlines, in one gzip of about 1 MB: refused
    with one line (as a compression bomb, or by the format on what follows its data), within
    512 MB of the whole process tree."""
    import os

    from polytrace.ingest import registry

    name, data = next(iter(registry.get(fmt).sample().files.items()))
    path = tmp_path / (PurePath(name).name + ".gz")
    member = gzip.compress(b"\n" * (16 * MB), mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(data, mtime=0))
        f.writelines(member for _ in range(64))
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    peak, out = peak_tree_rss([str(path), str(tmp_path / "t.duckdb")], env)
    assert out.startswith(f"refused {path.name}: ") and "\n" not in out, out
    assert peak < BASELINE_MB + 262, f"peak RSS {peak:.0f} MB"

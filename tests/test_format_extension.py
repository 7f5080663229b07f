"""A new trace format is one module, one registry line and its sample; nothing else changes.

The format below lives in a package made for the test. Registering it is the one line a
real format adds to ingest/registry.py; then detection, `polytrace ingest` (archives too)
and the bad-input corpus (its seeds, designed and random mutations) all work for it.
"""
from __future__ import annotations

import importlib
import sys
import textwrap
from collections import Counter

import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from polytrace.store.runs import delete_run
from tests.corpus import mutations
from tests.corpus.cases import build, dump
from tests.corpus.test_corpus import accepted_problem, cli_args, outcome, refusal_problem, run_cli, snapshot
from tests.ingest_settings import set_ingest_env

NAME = "lengths-tsv"
MODULE = '''
    """Response lengths as TSV: a `#lengths` line, then one `step<TAB>response_len` row per sample."""
    from __future__ import annotations

    from pathlib import Path

    from polytrace.ingest.canonical import samples_table
    from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
    from polytrace.ingest.sources import check_utf8, read_bytes

    MAGIC = b"#lengths\\n"


    def sniff(head: bytes, name: str) -> bool:
        return head.startswith(MAGIC)


    def parse(path: Path) -> Parsed:
        data = read_bytes(path)
        check_utf8(data, path)
        if not data.startswith(MAGIC):
            raise IngestError(path, "no #lengths line")
        rows = [line.split("\\t") for line in data[len(MAGIC):].decode().splitlines() if line.strip()]
        if not rows or any(len(r) != 2 or not all(c.strip().isdigit() for c in r) for r in rows):
            raise IngestError(path, "each row is step<TAB>response_len, whole numbers")
        cols = {"step": [int(r[0]) for r in rows], "response_len": [int(r[1]) for r in rows]}
        if max(max(c) for c in cols.values()) >= 2**31:
            raise IngestError(path, "a number is out of range")
        return Parsed(tables={"samples": samples_table(cols)})


    def sample() -> Sample:
        """Three samples over two steps."""
        return Sample.file("lengths.tsv", MAGIC + b"0\\t5\\n0\\t7\\n1\\t3\\n")


    FORMAT = Format(name="lengths-tsv", priority=10, sniff=sniff, parse=parse, sample=sample,
                    description="response lengths as TSV rows after a #lengths line")
'''


@pytest.fixture(scope="module")
def new_format(tmp_path_factory):
    """The format's module in a package of its own, and its one registry line."""
    root = tmp_path_factory.mktemp("extension")
    package = root / "polytrace_extension_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lengths_tsv.py").write_text(textwrap.dedent(MODULE))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        module = importlib.import_module("polytrace_extension_test.lengths_tsv")
        mp.setattr(registry, "FORMATS", [*registry.FORMATS, module.FORMAT])  # the registry line
        yield module.FORMAT
    for name in [m for m in sys.modules if m.startswith("polytrace_extension_test")]:
        del sys.modules[name]


def test_detection_claims_it(new_format, tmp_path):
    path = tmp_path / "any-name.txt"
    path.write_bytes(b"#lengths\n4\t10\n")
    assert registry.detect(path) is new_format
    assert registry.get(NAME) is new_format
    other = tmp_path / "other.txt"
    other.write_bytes(b"4\t10\n")
    assert registry.detect(other) is None


def test_polytrace_ingest_takes_it_and_archives_of_it(new_format, tmp_path):
    import zipfile

    db = tmp_path / "pt.duckdb"
    (name, data), = new_format.sample().files.items()
    (tmp_path / name).write_bytes(data)
    rc, out, err = run_cli(["ingest", str(tmp_path / name), "--db", str(db)])
    assert (rc, err.splitlines()[-1]) == (0, f"ingested {NAME}: samples=3")
    with zipfile.ZipFile(tmp_path / "more.zip", "w") as zf:
        zf.writestr("lengths/a.tsv", data.replace(b"1\t3", b"2\t9"))
    rc, out2, err = run_cli(["ingest", str(tmp_path / "more.zip"), "--db", str(db)])
    assert rc == 0, err
    con = store.open(db)
    try:
        assert con.execute("SELECT step, response_len FROM samples WHERE run_id = ? ORDER BY ALL",
                           [out.split()[-1]]).fetchall() == [(0, 5), (0, 7), (1, 3)]
        assert con.execute("SELECT file_name, format FROM ingests WHERE run_id = ?", [out2.split()[-1]]
                           ).fetchall() == [(f"{tmp_path / 'more.zip'}!lengths/a.tsv", NAME)]
    finally:
        con.close()


def test_the_corpus_mutates_its_sample_and_every_bad_case_is_refused(new_format, tmp_path, monkeypatch):
    set_ingest_env(monkeypatch, "POLYTRACE_MAX_INFLATE_BYTES", str(mutations.INFLATE_LIMIT))
    cases = build(NAME)
    assert len(cases) >= 200
    kinds = Counter(c.kind.split(":")[0] for c in cases)
    # designed cases on its sample and on the sample in each container, then random ones
    assert {"empty file", "gzip bomb", "member gzip bomb", "member name '../escape.json'",
            "random"} <= set(kinds)
    con = store.open(tmp_path / "corpus.duckdb")
    before = snapshot(con)
    tally, problems = Counter(), []
    try:
        for i, case in enumerate(cases):
            paths = dump(case, tmp_path / f"case{i}")
            try:
                run_ids = ingest_paths(con, paths, format=case.forced).run_ids
            except IngestError as e:
                bucket, problem = outcome(case, False, str(e))
                problem = problem or ("\n" in str(e) and f"error on several lines: {e!r}") or None
            else:
                bucket, problem = outcome(case, True, "")
                problem = problem or accepted_problem(con, run_ids)
            tally[bucket] += 1
            if problem:
                problems.append(f"{case.kind}: {problem}")
        after = snapshot(con)
    finally:
        con.close()
    assert not problems, "\n".join(problems)
    assert after == before
    assert tally["refused"] >= sum(c.must_reject for c in cases) and tally["accepted"] > 0


def test_the_cli_refuses_its_bad_cases_in_one_line(new_format, tmp_path, monkeypatch):
    set_ingest_env(monkeypatch, "POLYTRACE_MAX_INFLATE_BYTES", str(mutations.INFLATE_LIMIT))
    bad = [c for c in build(NAME) if c.must_reject][::10]
    db = tmp_path / "cli.duckdb"
    problems = []
    for i, case in enumerate(bad):
        rc, out, err = run_cli(cli_args(case, tmp_path / f"c{i}", db))
        problem = refusal_problem(rc, out, err) or ("accepted" if rc == 0 else None)
        if problem:
            problems.append(f"{case.kind}: {problem}")
    assert len(bad) >= 5
    assert not problems, "\n".join(problems)


def test_runs_it_made_can_be_deleted(new_format, tmp_path):
    # nothing outside ingest knows the format: its rows are ordinary canonical rows
    con = store.open(tmp_path / "pt.duckdb")
    try:
        path = tmp_path / "lengths.tsv"
        path.write_bytes(b"#lengths\n3\t4\n")
        run_id = ingest_paths(con, [path]).run_id
        assert con.execute("SELECT n, response_max FROM step_lengths WHERE run_id = ?",
                           [run_id]).fetchall() == [(1, 4)]
        assert delete_run(con, run_id)
        assert con.execute("SELECT count(*) FROM samples").fetchone() == (0,)
    finally:
        con.close()

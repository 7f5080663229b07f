"""The light commands pay only for what they use (issue 42): `--help` imports no DuckDB, Arrow or
catalog; `findings` reads the kept list without Arrow or the catalog package; `query` on a kept
answer imports neither, and prints what the runner computes; `ingest` imports neither scipy nor pandas."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from polytrace.cli import main
from polytrace.queries import answers, overview
from tests.goldens import load_case

RUNS = ("r1", "r3", "r4")


@pytest.fixture(scope="module")
def kept_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("light") / "kept.duckdb"
    con = load_case("findings", str(db))
    overview.refresh(con, overview.stale(con))
    con.close()
    return db


def loaded_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter has loaded after `polytrace ARGV`, and "catalog parsed"
    when it parsed the catalog."""
    code = ("import contextlib, io, json, sys\nfrom polytrace.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
            "load = sys.modules.get('polytrace.queries.catalog.load')\n"
            "parsed = bool(load and load._load_catalog.cache_info().currsize)\n"
            "print(json.dumps([*sys.modules, *(['catalog parsed'] if parsed else [])]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def test_help_imports_no_engine():
    loaded = loaded_after(["--help"])
    assert "polytrace.cli.parser" in loaded
    assert not {"duckdb", "pyarrow", "numpy", "polars", "polytrace.queries.catalog"} & loaded


def test_ingest_imports_neither_scipy_nor_pandas(tmp_path):
    from polytrace.ingest.formats import kineto

    sample = kineto.sample()
    for name, data in sample.files.items():
        (tmp_path / name).write_bytes(data)
    loaded = loaded_after(["ingest", *(str(tmp_path / a) for a in sample.args), "--db", str(tmp_path / "k.duckdb")])
    assert "polytrace.ingest.formats.kineto" in loaded and "polytrace.workload.costmodel" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("scipy", "pandas")}


def test_a_command_builds_its_own_parser_alone_and_a_wrong_name_lists_them_all(capsys):
    from polytrace.cli.parser import COMMANDS

    loaded = loaded_after(["findings", "--help"])
    assert "polytrace.cli.findings" in loaded and not {f"polytrace.cli.{c}" for c in COMMANDS if c != "findings"} & loaded
    with pytest.raises(SystemExit):
        main(["finding", "r4"])
    assert "invalid choice: 'finding' (choose from 'ingest', 'query'" in capsys.readouterr().err


def test_findings_on_a_kept_list_reads_no_arrow_and_parses_no_catalog(kept_db):
    loaded = loaded_after(["findings", "r4", "--db", str(kept_db)])
    assert "duckdb" in loaded and "polytrace.queries.findings" in loaded
    assert not {"pyarrow", "polytrace.queries.runner", "polytrace.queries.catalog", "catalog parsed"} & loaded
    # and the runner's path once the list is not kept
    con = load_case("findings", str(kept_db.parent / "unkept.duckdb"))
    con.close()
    assert "catalog parsed" in loaded_after(["findings", "r4", "--db", str(kept_db.parent / "unkept.duckdb")])


def test_query_on_a_kept_answer_parses_no_catalog(kept_db):
    loaded = loaded_after(["query", "run_summary", "-p", "run_id=r4", "--db", str(kept_db)])
    assert "polytrace.queries.answers" in loaded and "catalog parsed" not in loaded
    # its JSON rows printed, found by the catalog's digest alone
    assert not {"pyarrow", "numpy", "polytrace.queries.runner", "polytrace.queries.catalog"} & loaded
    # a parameter besides the run: the runner answers
    loaded = loaded_after(["query", "metric", "-p", "run_id=r4", "-p", "key=x", "--db", str(kept_db)])
    assert "catalog parsed" in loaded


@pytest.mark.parametrize("output", ["json", "csv", "table"])
def test_a_kept_answer_prints_as_the_computed_one(kept_db, tmp_path, capsys, output):
    unkept = tmp_path / "unkept.duckdb"
    load_case("findings", str(unkept)).close()
    for query in answers.stored_queries():
        for run_id in RUNS if output == "json" else ("r4",):  # the other outputs render the same rows
            argv = ["query", query.name, "-p", f"run_id={run_id}", "--output", output]
            assert main([*argv, "--db", str(kept_db)]) == 0
            kept = capsys.readouterr().out
            assert main([*argv, "--db", str(unkept)]) == 0
            assert kept == capsys.readouterr().out, (query.name, run_id)
    if output == "json":
        assert json.loads(kept)  # the last one printed something to compare


def test_the_findings_printed_from_the_kept_list_are_the_computed_ones(kept_db, tmp_path, capsys):
    unkept = tmp_path / "unkept.duckdb"
    load_case("findings", str(unkept)).close()
    for run_id in RUNS:
        assert main(["findings", run_id, "--db", str(kept_db), "--output", "json"]) == 0
        kept = json.loads(capsys.readouterr().out)
        assert main(["findings", run_id, "--db", str(unkept), "--output", "json"]) == 0
        assert kept == json.loads(capsys.readouterr().out) and (kept or run_id == "r2")
    assert len(kept) == 6


def test_an_unknown_framework_is_said_with_the_known_ones(tmp_path, capsys):
    assert main(["ingest", str(tmp_path), "--framework", "nope", "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "--framework: unknown 'nope'; known:" in err and "openrlhf" in err and "verl" in err

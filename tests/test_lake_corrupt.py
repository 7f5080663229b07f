"""A lake with one damaged Parquet file: `query --lake` and `serve --lake` say which file and why in
one line and exit 2, in the words `polytrace ingest` uses for the same lake."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polytrace import store
from polytrace.ingest.load import ingest_paths
from polytrace.store.lake import export_runs, open_lake, partitions
from tests.conftest import FIXTURES, ROOT, free_port

INPUTS = [FIXTURES / "formats" / "samples.csv", FIXTURES / "verl" / "small.log"]


def _cut_in_half(part: Path) -> None:
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])


def _unrelated_columns(part: Path) -> None:
    pq.write_table(pa.table({"foo": [1, 2], "bar": ["x", "y"]}), part)


DAMAGES = {
    "junk bytes": (lambda part: part.write_bytes(b"junk bytes\n"), "not a readable Parquet file ("),
    "truncated": (_cut_in_half, "not a readable Parquet file ("),
    "unrelated columns": (_unrelated_columns, "not a file of table runs (none of its columns"),
}


@pytest.fixture(scope="module")
def healthy_lake(tmp_path_factory) -> Path:
    """Two runs ingested from the fixtures, exported as `polytrace export` does."""
    work = tmp_path_factory.mktemp("healthy")
    con = store.open(work / "a.duckdb")
    run_ids = [ingest_paths(con, [path]).run_id for path in INPUTS]
    export_runs(con, run_ids, work / "lake")
    con.close()
    return work / "lake"


def _damaged(healthy_lake: Path, tmp_path: Path, damage: str, which: int) -> tuple[Path, str]:
    """A copy of the lake with the runs file of its first (0) or last (-1) run damaged; returns
    the lake and that file, relative to the lake."""
    lake = tmp_path / "badlake"
    shutil.copytree(healthy_lake, lake)
    run_id = sorted(partitions(lake / "table=runs"))[which]
    part = Path("table=runs", f"run_id={run_id}", "part-0.parquet")
    DAMAGES[damage][0](lake / part)
    return lake, str(part)


def _polytrace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    return subprocess.run([sys.executable, "-m", "polytrace", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def _assert_one_line_naming(out: subprocess.CompletedProcess, lake: Path, part: str, damage: str) -> None:
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert out.stderr.startswith(f"error: {lake}: {part}: {DAMAGES[damage][1]}"), out.stderr


# The last run's file is the case that used to pass `open_lake` (DuckDB read only the first file
# of each table there) and fail inside the query instead.
@pytest.mark.parametrize("which", [0, -1], ids=["first run", "last run"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_query_over_a_damaged_lake_is_one_line_naming_the_file(healthy_lake, tmp_path, damage, which):
    lake, part = _damaged(healthy_lake, tmp_path, damage, which)
    out = _polytrace("query", "runs", "--lake", str(lake), cwd=tmp_path)
    _assert_one_line_naming(out, lake, part, damage)
    assert out.stdout == ""


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_serve_refuses_a_damaged_lake_in_one_line(healthy_lake, tmp_path, damage):
    """As for a lake directory that is missing: no server over a lake it cannot read."""
    lake, part = _damaged(healthy_lake, tmp_path, damage, -1)
    out = _polytrace("serve", "--lake", str(lake), "--port", str(free_port()), cwd=ROOT)
    _assert_one_line_naming(out, lake, part, damage)


def test_ingest_names_the_damaged_file_in_the_same_words(healthy_lake, tmp_path):
    lake, part = _damaged(healthy_lake, tmp_path, "junk bytes", -1)
    out = _polytrace("ingest", str(lake), "--db", str(tmp_path / "b.duckdb"), cwd=tmp_path)
    assert out.returncode == 2 and "not a readable Parquet file (" in out.stderr


def test_a_file_of_an_older_export_reads_its_missing_column_as_null(healthy_lake, tmp_path):
    """Exports of two PolyTrace versions in one lake, the older (without runs.length_unit) last:
    DuckDB would read it as it read the first file, and fail on the column it lacks."""
    lake = tmp_path / "lake"
    shutil.copytree(healthy_lake, lake)
    first, last = sorted(partitions(lake / "table=runs"))
    _set_length_unit(lake / f"table=runs/run_id={first}/part-0.parquet", "tokens")
    older = lake / f"table=runs/run_id={last}/part-0.parquet"
    pq.write_table(pq.read_table(older).drop_columns(["length_unit"]), older)
    con = open_lake(lake)
    try:
        assert con.execute("SELECT run_id, length_unit FROM runs ORDER BY run_id").fetchall() == [
            (first, "tokens"), (last, None)]
    finally:
        con.close()


def _set_length_unit(part: Path, unit: str) -> None:
    table = pq.read_table(part)
    column = table.schema.get_field_index("length_unit")
    pq.write_table(table.set_column(column, "length_unit", pa.array([unit] * table.num_rows)), part)

"""The whole path, thin: a file goes in, a row lands in DuckDB, a query answers over CLI and REST."""
from __future__ import annotations

import json
import subprocess
import sys

import httpx

from polytrace import store

PACKED = (
    '{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 10, "output": [1, 3], "n_sampling": 2, "validate": false}\n'
    '{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "local_index": 0, "input": 20, "output": [5, 7], "n_sampling": 2, "validate": false}\n'
)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "polytrace", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_cli_ingest_then_query(tmp_path):
    src = tmp_path / "packed_lengths_step_0.jsonl"
    src.write_text(PACKED)
    db = str(tmp_path / "a.duckdb")
    out = cli("ingest", str(src), "--db", db)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.strip().splitlines()[-1]
    q = cli("query", "length_stats", "--db", db, "-p", f"run_id={run_id}", "--output", "json")
    assert q.returncode == 0, q.stderr
    (row,) = json.loads(q.stdout)
    assert row["n"] == 4 and row["response_max"] == 7
    assert row["response_p50"] == 4.0  # median of 1, 3, 5, 7
    assert row["tail_ratio"] == 7 / 4



def test_a_parameter_error_names_the_query_parameters(tmp_path):
    db = tmp_path / "never.duckdb"
    missing = cli("query", "gpu_time", "--db", str(db))
    bad = cli("query", "gpu_time", "--db", str(db), "-p", "run_id=r", "-p", "include_last_step=maybe")
    unknown = cli("query", "runs", "--db", str(db), "-p", "x=1")
    takes = "gpu_time takes run_id=VARCHAR (required), include_last_step=BOOLEAN (default false)"
    assert (missing.returncode, missing.stderr) == (2, f"error: missing required parameter 'run_id'; {takes}\n")
    assert (bad.returncode, bad.stderr) == (2, f"error: parameter 'include_last_step' must be BOOLEAN, "
                                               f"got 'maybe'; {takes}\n")
    assert unknown.stderr == "error: unknown parameter 'x' for query 'runs'; runs takes no parameters\n"
    # a declared least value (`>= 1`) is checked, and said with the parameters
    none = cli("query", "whatif_savings", "--db", str(db), "-p", "run_id=r", "-p", "gpus=0")
    assert (none.returncode, none.stderr) == (2, "error: parameter 'gpus' must be at least 1, got 0; whatif_savings "
                                                 "takes run_id=VARCHAR (required), gpus=INTEGER (default NULL, at least 1)\n")
    assert not db.exists()  # checked before the database is opened

def test_rest_serves_the_same_rows(tmp_path, make_server):
    from polytrace.ingest.load import ingest_paths

    src = tmp_path / "packed_lengths_step_0.jsonl"
    src.write_text(PACKED)
    db = tmp_path / "s.duckdb"
    con = store.open(db)
    run_id = ingest_paths(con, [src]).run_id
    con.close()
    srv = make_server(db=str(db))
    body = httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id}).json()
    assert body["ok"] is True and body["truncated"] is False
    assert body["columns"][:2] == ["step", "n"]
    assert body["rows"][0][:2] == [0, 4]


def test_a_notebook_reads_through_connect_without_taking_the_database(tmp_path):
    import pytest

    from polytrace import connect

    src = tmp_path / "packed_lengths_step_0.jsonl"
    src.write_text(PACKED)
    db = tmp_path / "n.duckdb"
    with pytest.raises(store.StoreError, match="no database at"):
        connect(db)  # a missing file is an error, never a new empty database
    assert not db.exists()
    with connect(db, write=True) as writer:
        run_id = writer.ingest(src)
    with connect(db) as notebook:
        # lengths 1, 3, 5, 7: median 4, max 7 (as over the CLI)
        stats = notebook.query("length_stats", run_id=run_id).to_dicts()
        assert [(r["n"], r["response_p50"], r["response_max"]) for r in stats] == [(4, 4.0, 7)]
        # another reader opens the file meanwhile
        q = cli("query", "runs", "--db", str(db), "--output", "json")
        assert q.returncode == 0, q.stderr
        assert [r["run_id"] for r in json.loads(q.stdout)] == [run_id]
        with pytest.raises(store.StoreError, match="read-only: connect\\(write=True\\) to ingest"):
            notebook.ingest(src)


def test_the_terminal_table_writes_numbers_out_in_full():
    import pyarrow as pa

    from polytrace.queries.render import terminal_text
    from polytrace.queries.runner import Answer

    answer = Answer(pa.table({"us": [63400.5, 1411.0, 999.95, -0.000123, None], "n": [1, 2, 3, 4, 5]}), False)
    cells = [line.split("│")[1:3] for line in terminal_text(answer).splitlines() if line.startswith("│")]
    assert [(u.strip(), n.strip()) for u, n in cells] == [
        ("63,400", "1"), ("1,411", "2"), ("1,000", "3"), ("-0.000123", "4"), ("", "5")]


def test_the_terminal_table_prints_brackets_in_text_as_they_are():
    from polytrace.queries.render import Rows, terminal_text

    # Kineto's record_function names, as the shared alexnet trace has them
    names = ["[param]cuda", "[bold]x[/bold]", "[pytorch.model.alex_net|0|0|0]"]
    text = terminal_text(Rows(["name"], [(n,) for n in names]))
    assert [line.strip("│ ") for line in text.splitlines() if line.startswith("│")] == names


def test_the_terminal_table_is_boxed_whole_its_text_escaped_and_wide_characters_counted_twice():
    from polytrace.queries.render import Rows, terminal_text

    assert terminal_text(Rows(["step", "kernel"], [(1, "gemm\x1b[2J"), (None, "注意")])) == (
        "┏━━━━━━┳━━━━━━━━━━━━━┓\n"
        "┃ step ┃ kernel      ┃\n"
        "┡━━━━━━╇━━━━━━━━━━━━━┩\n"
        "│ 1    │ gemm\\x1b[2J │\n"
        "│      │ 注意        │\n"
        "└──────┴─────────────┘\n")
    assert terminal_text(Rows(["a"], [])) == "┏━━━┓\n┃ a ┃\n┡━━━┩\n└───┘\n"  # as rich draws an empty one


def test_serve_on_a_port_in_use_says_so_in_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "polytrace", "serve", "--db", str(tmp_path / "s.duckdb"),
                              "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (
        2, f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another server there? choose --port)\n")
    assert not (tmp_path / "s.duckdb").exists()  # refused before the database is opened

"""The demo replaces a database only when it holds nothing but demo runs, read through the store's
open and the catalog's `runs` query."""
from __future__ import annotations

import pytest

from polytrace import store
from polytrace.demo import DEMO_PREFIX, DemoDbError, fresh_db_path


def db_with_runs(path, names: list[str]):
    con = store.open(path)
    for i, name in enumerate(names):
        con.execute("INSERT INTO runs (run_id, name, format, created_at) VALUES (?, ?, 'x', now())",
                    [f"r{i}", name])
    con.close()
    return path


def test_a_database_of_demo_runs_is_replaced(tmp_path):
    db = db_with_runs(tmp_path / "demo.duckdb", [DEMO_PREFIX + "a", DEMO_PREFIX + "b"])
    assert fresh_db_path(str(db)) == db
    assert not db.exists()


def test_a_database_with_a_real_run_is_kept(tmp_path):
    db = db_with_runs(tmp_path / "mine.duckdb", [DEMO_PREFIX + "a", "my run"])
    with pytest.raises(DemoDbError, match="holds runs that are not demo runs"):
        fresh_db_path(str(db))
    assert db.exists()


def test_a_file_that_is_no_database_is_kept(tmp_path):
    db = tmp_path / "notes.duckdb"
    db.write_text("not a database")
    with pytest.raises(DemoDbError, match="is not a database the demo may replace"):
        fresh_db_path(str(db))
    assert db.exists()


def test_a_port_in_use_is_said_before_anything_is_synthesized(tmp_path, capsys):
    """The demo binds its port first: taken, it exits with one line and writes no database."""
    import socket

    from polytrace.cli import main

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        db = tmp_path / "demo.duckdb"
        assert main(["demo", "--port", str(port), "--db", str(db)]) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}") and err.count("\n") == 1
    assert not db.exists() and "synthesizing" not in err

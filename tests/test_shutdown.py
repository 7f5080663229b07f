"""Closing the server's database while queries run: they are interrupted, new ones refused, and
the process exits cleanly instead of aborting inside DuckDB."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import duckdb
import pytest

from polytrace.server.db import Closing, Database
from polytrace.server.errors import explained
from tests.conftest import ROOT

# Sums a range for about as long as it takes: a query that is still running when it is closed.
LONG = "SELECT sum(i) FROM range(10000000000) t(i)"
BUSY = "SELECT sum(i) FROM range(300000) t(i)"


def test_close_interrupts_running_queries_then_refuses_new_ones(tmp_path):
    db = Database(str(tmp_path / "db.duckdb"))
    outcome = []

    def run():
        try:
            db.read(lambda cur: cur.execute(LONG).fetchall(), 600_000, "the long query")
            outcome.append("finished")
        except Exception as e:  # noqa: BLE001  (what the query ended with is the point)
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not db._busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert db._busy, "the long query never started"
    db.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert outcome and outcome[0] != "finished"  # interrupted, not run to its end
    with pytest.raises(Closing):
        db.read(lambda cur: cur.execute("SELECT 1").fetchall(), 1_000, "a new query")
    with pytest.raises(duckdb.Error):  # what a follower's loop catches, says, and goes on after
        db.write(lambda cur: cur.execute("SELECT 1"))
    error = explained(None, Closing("the server is shutting down: try again once it is back"))
    assert error.status == 503 and "shutting down" in error.error


def test_exit_with_queries_running_on_daemon_threads_is_clean(tmp_path):
    """Before Database.close waited for them, every such exit aborted (rc 134, "terminate called
    after throwing an instance of ''"): a daemon thread came back from DuckDB into a
    finalizing interpreter."""
    script = textwrap.dedent(f"""
        import sys, threading, time
        from polytrace.server.db import Database
        db = Database(sys.argv[1])
        def run():
            while True:
                db.read(lambda cur: cur.execute({BUSY!r}).fetchall(), 60_000, "busy")
        for _ in range(4):
            threading.Thread(target=run, daemon=True).start()
        time.sleep(0.3)
    """)
    for i in range(3):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"db{i}.duckdb")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "terminate called" not in done.stderr

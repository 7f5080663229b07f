"""Shared fixtures: real DuckDB files, the shared trace data, and a real uvicorn server."""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from polytrace import store

ROOT = Path(__file__).resolve().parent.parent
# The real traces (../shared/data beside a checkout); POLYTRACE_TEST_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("POLYTRACE_TEST_DATA") or ROOT.parent / "shared" / "data")
NO_DATA = (f"the real traces are not at {SHARED_DATA}: set POLYTRACE_TEST_DATA to the shared data "
           "folder (polytrace/, verl-logs/, kineto/, gpu-replay-h200/)")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        skip_for_data()
    return SHARED_DATA


def skip_for_data() -> None:
    """Skip a test that needs the real traces, or fail it where they are required (CI)."""
    if os.environ.get("POLYTRACE_REQUIRE_TEST_DATA"):
        pytest.fail(NO_DATA)
    pytest.skip(NO_DATA)


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if NO_DATA in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} tests skipped: {NO_DATA}", yellow=True)


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def con(db_path):
    c = store.open(db_path)
    yield c
    c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """create_app under a real uvicorn on a free loopback port, in a thread."""

    def __init__(self, settings):
        import uvicorn

        from polytrace.server.app import create_app

        self.app = create_app(settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.time() + 15
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def make_server(tmp_path):
    """Start a live server; keyword arguments override Settings fields."""
    from polytrace.settings import Settings

    servers = []

    def start(**overrides) -> LiveServer:
        overrides.setdefault("db", str(tmp_path / "server.duckdb"))
        srv = LiveServer(Settings(**overrides)).__enter__()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.__exit__(None, None, None)

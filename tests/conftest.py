"""Shared fixtures: real DuckDB files, the shared trace data, and a real uvicorn server; and the
suite's tiers, marked here from what each test uses."""
from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
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
def uploads_dir() -> Path:
    """A server's TMPDIR for uploads, short: multiprocessing puts the forkserver's socket under
    TMPDIR, and a socket path past 107 bytes (pytest-xdist's tmp_path is deep) stops parse
    workers from starting."""
    folder = Path(tempfile.mkdtemp(prefix="pt-uploads-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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


# moto's server, quiet (a log record per request costs it ~5%), until its stdin closes
MOTO = """import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.WARNING)
ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False).start()
sys.stdin.read()
"""


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3-compatible server on 127.0.0.1 at a free port, for the session: its endpoint URL.
    In a process of its own: in the test's, its request handling shared one interpreter lock with
    the test's readers and took the 8 concurrent publishers 3-5 minutes."""
    pytest.importorskip("moto.server")
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-c", MOTO, str(port)], stdin=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/moto-api/data.json", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"moto's server did not start on {url}")
            time.sleep(0.1)
    yield url
    server.stdin.close()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()


S3_BUCKET = "team"
S3_SECRET = "wJalrXUtnFEMI-test-secret-K7MDENG"  # a test's credential, grepped for in what it prints


@pytest.fixture
def s3(s3_server, monkeypatch):
    """An empty moto server (reset) with the bucket `team`, and the AWS environment that reaches it."""
    import httpx
    from pyarrow.fs import S3FileSystem

    httpx.post(f"{s3_server}/moto-api/reset").raise_for_status()
    for key, value in {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "AKIATESTPOLYTRACE",
                       "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    S3FileSystem(endpoint_override=s3_server, allow_bucket_creation=True).create_dir(S3_BUCKET)
    return s3_server


# --- tiers ---------------------------------------------------------------------------------------
# Each marker is applied here from what a test uses: its fixtures (by name, and what their code
# and the test's own code name, following the test modules' helper functions), so that a new test
# lands in its tier with no decorator. `pytest -m fast` is the inner loop: everything that needs
# none of the tiers below, nor is slow. CI runs them all.
USES = {
    "server": re.compile(r"\b(make_server|LiveServer|uvicorn)\b|[\"']serve[\"']|\"polytrace\", \"demo\""),
    "shared_data": re.compile(r"\b(shared_data|SHARED_DATA)\b"),
    "cli": re.compile(r"\"-m\", \"polytrace\"|\bpolytrace_cli\(|/ \"polytrace\""),
}
FIXTURE_MARKS = {"spark": "spark", "spark_cluster": "spark_cluster", "browser": "browser", "s3_server": "s3"}
MODULE_MARKS = {"test_package": ("package",), "test_spark_cluster": ("spark", "spark_cluster")}
# Tests that take seconds each with none of the markers above (the slowest of `pytest -m fast -n 2
# --durations=40`, 10-112 s each at a load average of 9-14; a module name covers all its tests,
# a test's name all its parameters).
SLOW = {
    "test_overview", "test_page_speed", "test_shutdown",
    "test_aggregates_equal_the_raw_computation_on_every_case",  # test_queries_golden
    "test_a_local_ray_jobs_timeline", "test_wandb_log_decoding_agrees_with_the_wandb_protobuf_classes",
    "test_an_offline_wandb_run",  # test_sources_new: Ray and W&B themselves
    "test_cli_refuses_bad_input",  # tests/corpus
    "test_gigabytes_of_inflated_lines_in_bounded_memory",  # test_ingest_streaming
    "test_every_formats_gzip_bomb_is_refused_in_bounded_memory",
    "test_ten_thousand_tiny_files_in_one_upload_cost_little_memory_each",  # test_attacks
    "test_golden_cases_round_trip_through_the_lake",  # test_lake_engine
    "test_demo_run_carries_the_cap_and_gpus", "test_demo_run_is_realistic_and_ingests_as_one_run",
    "test_lognormal_fit_recovers_its_parameters",  # test_workload
    "test_the_server_reads_the_kept_list_unless_an_append_changed_the_run",
    "test_every_evidence_url_answers_with_rows", "test_the_api_cli_and_module_give_one_list",  # test_findings
    "test_each_stored_answer_is_what_its_query_computes",
    "test_a_run_without_answers_is_stale_and_the_next_writer_stores_them",  # test_answers
}
TIERS = ("server", "shared_data", "spark", "spark_cluster", "browser", "package", "cli", "s3", "slow")


def pytest_collection_modifyitems(config, items):
    for item in items:
        marks = _uses(item)
        for name in marks:
            item.add_marker(name)
        if not marks & set(TIERS) and not any(item.get_closest_marker(t) for t in TIERS):
            item.add_marker("fast")
        group = _shared_setup(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


def _uses(item) -> set[str]:
    module = item.module.__name__.rsplit(".", 1)[-1]
    marks = set(MODULE_MARKS.get(module, ()))
    names = set(item.fixturenames)
    marks |= {mark for fixture, mark in FIXTURE_MARKS.items() if fixture in names}
    text = "\n".join(_code(item))
    marks |= {mark for mark, pattern in USES.items() if pattern.search(text)}
    if module in SLOW or item.originalname in SLOW or item.name in SLOW:
        marks.add("slow")
    return marks


def _code(item) -> list[str]:
    """The source of the test, its fixtures, and every test-suite function or class they name."""
    todo = [item.function] + [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs
                              if _ours(d.func)]
    seen, sources = set(), []
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        src = _source(obj)
        sources.append(src)
        named = {**_helpers(item.module.__name__), **_helpers(obj.__module__)}
        todo += [f for name, f in named.items() if id(f) not in seen and re.search(rf"\b{name}\b", src)]
    return sources


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("tests")


_HELPERS: dict[str, dict] = {}


def _helpers(module: str) -> dict:
    """A test module's functions and classes, its own and those it imports from the suite."""
    if module not in _HELPERS:
        import sys

        _HELPERS[module] = {name: obj for name, obj in vars(sys.modules[module]).items()
                            if (inspect.isfunction(obj) or inspect.isclass(obj)) and _ours(obj)}
    return _HELPERS[module]


_SOURCES: dict[int, str] = {}


def _source(obj) -> str:
    if id(obj) not in _SOURCES:
        try:
            _SOURCES[id(obj)] = inspect.getsource(obj)
        except (OSError, TypeError):
            _SOURCES[id(obj)] = ""
    return _SOURCES[id(obj)]


def _shared_setup(item) -> str | None:
    """Under pytest-xdist (--dist loadgroup), the tests that share a module- or session-scoped
    fixture of the suite run on one worker, which builds it once."""
    for defs in item._fixtureinfo.name2fixturedefs.values():
        for d in defs:
            if d.scope != "function" and _ours(d.func):
                return item.module.__name__
    return None

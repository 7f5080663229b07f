"""The installable package: the wheel carries everything under one `polytrace` namespace and works
installed (not editable) in a fresh virtual environment, and the layers hold (import-linter)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import FIXTURES, ROOT, free_port


# What a build must not see: a stale build/ would put deleted files into the wheel.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                    "*.duckdb", "*.duckdb.wal", "test-artifacts", ".pytest_cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a clean copy of the source tree."""
    source, out = tmp_path_factory.mktemp("source") / "polytrace", tmp_path_factory.mktemp("dist")
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, capture_output=True, cwd=out)
    (built,) = out.glob("polytrace-*.whl")
    return built


def test_the_wheel_installs_one_namespace_with_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"polytrace"}
    for needed in ("polytrace/queries/length_stats.sql", "polytrace/store/schema.sql",
                   "polytrace/store/aggregates/step_lengths.sql", "polytrace/frontend/templates/run.html",
                   "polytrace/frontend/static/charts.js", "polytrace/server/app.py",
                   "polytrace/ingest/formats/kineto.py", "polytrace/workload/simulate.py"):
        assert needed in names, needed


def test_import_contracts_hold(wheel, tmp_path):
    """import-linter reads the layers from pyproject.toml. It walks a package's own folder, so it
    runs on the wheel's files, where every folder sits inside polytrace/ as installed."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    out = subprocess.run([str(lint), str(ROOT / "pyproject.toml"), "--no-cache"],
                         cwd=site, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel pip-installed (not editable); the dependencies come from this
    environment's site-packages through a .pth file, so nothing is downloaded."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                    "--no-deps", "--no-index", "-q", str(wheel)], check=True, capture_output=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_polytrace_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_") and k != "PYTHONPATH"}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_installed_wheel_runs_every_command_and_page(installed, tmp_path):
    where = _run(installed, "python", "-c", "import polytrace.server.app as a; print(a.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(installed)), where  # the installed copy, not the source tree
    generic = _run(installed, "python", "-c", "import server", cwd=tmp_path)
    assert generic.returncode != 0 and "No module named 'server'" in generic.stderr
    assert _run(installed, "polytrace", "demo", "--help", cwd=tmp_path).returncode == 0
    db = tmp_path / "w.duckdb"
    trace = FIXTURES / "formats" / "reward_timings_step_3.jsonl"
    ingested = _run(installed, "polytrace", "ingest", str(trace), "--db", str(db), cwd=tmp_path)
    assert ingested.returncode == 0, ingested.stderr
    run_id = ingested.stdout.split()[0]
    queried = _run(installed, "polytrace", "query", "reward_imbalance", "--db", str(db), "-p",
                   f"run_id={run_id}", "--output", "csv", cwd=tmp_path)
    assert queried.returncode == 0 and queried.stdout.startswith("step,ranks,max_s"), queried
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    server = subprocess.Popen([str(installed / "bin" / "polytrace"), "serve", "--db", str(db), "--port",
                               str(port)], cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(port, server)
        for path in ("/", f"/runs/{run_id}", f"/compare?a={run_id}&b={run_id}", "/queries",
                     f"/queries/reward_imbalance?run_id={run_id}", "/docs", "/openapi.json",
                     "/static/charts.js", "/static/style.css", "/static/plotly.min.js",
                     f"/api/queries/run_summary?run_id={run_id}"):
            r = httpx.get(base + path, timeout=30)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
        assert "reward" in httpx.get(f"{base}/runs/{run_id}").text.lower()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_for(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("server did not start")

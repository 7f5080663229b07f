"""Dockerfile and docker-compose.yml agree with the CLI and the settings (no Docker engine needed)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import PurePosixPath

import pytest
import yaml

from polytrace.cli import build_parser
from polytrace.settings import FIELDS, Settings
from tests.conftest import ROOT, free_port

ENV_PREFIX = "POLYTRACE_"


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    instructions, pending = [], ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = pending.partition(" ")
            instructions.append((word.upper(), rest.strip()))
            pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def args_of(instr: str) -> list[str]:
    return [rest for word, rest in dockerfile() if word == instr]


def docker_env() -> dict[str, str]:
    env = {}
    for rest in args_of("ENV"):
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def exec_form(rest: str) -> list[str]:
    argv = json.loads(rest)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


@pytest.fixture(scope="module")
def service() -> dict:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert [name for name, s in compose["services"].items() if not s.get("profiles")] == ["polytrace"]
    svc = compose["services"]["polytrace"]
    svc["_volumes"] = compose.get("volumes") or {}
    return svc


def serve_settings(argv: list[str], env: dict[str, str], monkeypatch) -> Settings:
    """What `polytrace serve` would run with, given this command line and environment."""
    for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert argv[0] == "polytrace"
    args = build_parser().parse_args(argv[1:])  # --db defaults from POLYTRACE_DB at build time
    assert args.command == "serve"
    explicit = {k: getattr(args, k) for k in ("host", "port") if getattr(args, k) is not None}
    return Settings(db=args.db, **explicit)


def compose_env(service: dict, token: str = "s3cret") -> dict[str, str]:
    env = {k: str(v) for k, v in service["environment"].items()}
    env["POLYTRACE_TOKEN"] = token  # what compose substitutes for ${POLYTRACE_TOKEN:?...}
    return env


def test_dockerfile_base_user_and_install():
    base = args_of("FROM")
    assert len(base) == 1 and base[0].startswith("python:") and base[0].endswith("-slim")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert base[0] == f"python:{requires.removeprefix('>=')}-slim"
    order = [word for word, _ in dockerfile()]
    user = args_of("USER")
    assert user == ["polytrace"]
    assert order.index("USER") < order.index("CMD") and order.index("USER") < order.index("HEALTHCHECK")
    assert any("useradd" in r and "polytrace" in r for r in args_of("RUN"))
    assert any(r.startswith("pip install .") for r in args_of("RUN"))


def test_dockerfile_copies_every_package_pyproject_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    needed |= {"pyproject.toml", project["project"]["readme"]}
    copied = {PurePosixPath(src).parts[0] for rest in args_of("COPY") for src in rest.split()[:-1]}
    assert needed <= copied, f"not copied into the image: {sorted(needed - copied)}"
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert not needed & ignored
    assert {".git", "tests", "*.duckdb"} <= ignored


def test_dockerfile_command_port_and_env_agree_with_cli_and_settings(monkeypatch):
    env = docker_env()
    fields = set(FIELDS)
    assert {k for k in env if k.startswith(ENV_PREFIX)} <= {ENV_PREFIX + f.upper() for f in fields}
    settings = serve_settings(exec_form(args_of("CMD")[0]), env, monkeypatch)
    assert settings.host == "0.0.0.0"
    assert args_of("EXPOSE") == [str(settings.port)] == [env["POLYTRACE_PORT"]]
    assert settings.db == "/data/polytrace.duckdb"
    assert args_of("VOLUME") == [json.dumps([str(PurePosixPath(settings.db).parent)])]


def test_compose_service_agrees_with_cli_settings_and_dockerfile(service, monkeypatch):
    env = compose_env(service)
    assert set(env) <= {ENV_PREFIX + f.upper() for f in FIELDS}
    settings = serve_settings(service["command"], env, monkeypatch)
    assert settings.host == "0.0.0.0" and settings.token == "s3cret"
    assert settings.exposure_warning() is None
    assert service["command"] == exec_form(args_of("CMD")[0])

    published, container = service["ports"][0].rsplit(":", 1)
    assert int(container) == settings.port == int(args_of("EXPOSE")[0])
    assert published.startswith("${") or published.isdigit()

    volume, mount = service["volumes"][0].split(":")
    assert volume in service["_volumes"], "the database volume must be a named volume"
    assert mount == str(PurePosixPath(settings.db).parent)
    assert service["restart"] == "unless-stopped"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert service["build"] == "." and service["image"] == f"polytrace:{version}"


def test_compose_takes_the_token_from_the_environment_and_requires_it(service):
    raw = service["environment"]["POLYTRACE_TOKEN"]
    assert raw.startswith("${POLYTRACE_TOKEN:?") and raw.endswith("}")


def test_compose_healthcheck_is_the_dockerfiles(service):
    hc = args_of("HEALTHCHECK")[0]
    docker_cmd = exec_form(hc[hc.index("CMD") + 3:].strip())
    assert service["healthcheck"]["test"] == ["CMD", *docker_cmd]
    assert "/api/health" in docker_cmd[-1]
    assert service["healthcheck"]["retries"] >= 1


def test_healthcheck_command_probes_a_live_server(make_server, tmp_path):
    """The HEALTHCHECK's own Python line: exit 0 against a live server, non-zero on a dead port."""
    hc = args_of("HEALTHCHECK")[0]
    argv = exec_form(hc[hc.index("CMD") + 3:].strip())
    assert argv[0] == "python"
    srv = make_server(db=str(tmp_path / "hc.duckdb"))
    live = subprocess.run([sys.executable, *argv[1:]], env={**os.environ, "POLYTRACE_PORT": str(srv.port)},
                          capture_output=True, timeout=30)
    assert live.returncode == 0, live.stderr.decode()[-300:]
    dead = subprocess.run([sys.executable, *argv[1:]], env={**os.environ, "POLYTRACE_PORT": str(free_port())},
                          capture_output=True, timeout=30)
    assert dead.returncode != 0


def test_the_s3_profile_serves_the_lake_in_its_store_with_keys_from_the_environment(monkeypatch):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    store, lake = compose["services"]["minio"], compose["services"]["polytrace-lake"]
    assert store["profiles"] == lake["profiles"] == ["s3"] and lake["depends_on"] == ["minio"]
    args = build_parser().parse_args(lake["command"][1:])
    assert args.command == "serve" and args.lake.startswith("s3://")
    env = lake["environment"]
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    # keys and the token are substituted from the deployer's environment, never written here
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "POLYTRACE_TOKEN"):
        assert env[key].startswith("${") and ":?" in env[key], key
    assert {k for k in env if k.startswith(ENV_PREFIX)} <= {ENV_PREFIX + f.upper() for f in FIELDS}
    assert store["volumes"][0].split(":")[0] in compose["volumes"]

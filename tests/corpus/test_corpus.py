"""Every corpus input is refused with one line (CLI) or a 4xx in the error shape (API), and leaves the data as it was.

A random mutation may happen to stay valid: then it must be a real run (a runs row with
rows), is counted as accepted, and is deleted again. A case designed to be invalid
(`must_reject`) must always be refused. Run `pytest -s` to see the counts per format.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.ingest import registry
from polytrace.ingest.load import ingest_paths
from polytrace.store.runs import data_tables, delete_run
from tests.conftest import LiveServer
from tests.corpus import mutations
from tests.corpus.cases import Case, build, dump
from tests.corpus.seeds import seeds

FORMATS = [f.name for f in registry.FORMATS]
# The refusal a parsed-valid file of this format gets at load time: it counts as "parsed",
# and an input designed to be invalid must be refused before it (by the parser).
LOAD_ONLY = {"polytrace-filter": "with no packed lengths in the same ingest"}
PACKED = registry.get("polytrace-packed").sample()
# In-process CLI runs take every CLI_EVERY-th case (POLYTRACE_CORPUS_CLI_EVERY=1: all of them).
CLI_EVERY = int(os.environ.get("POLYTRACE_CORPUS_CLI_EVERY", "8"))
# The API runs every case bound to be refused (api_must_reject) and a seeded 1/API_OTHERS_EVERY of
# the others (=1: all): those may be accepted, and an accepted upload is ingested and summed up
# (~0.5 s each, a refusal ~0.1 s).
API_OTHERS_EVERY = int(os.environ.get("POLYTRACE_CORPUS_API_OTHERS_EVERY", "4"))
# Subprocess CLI runs: the same code path as the in-process bulk, with a real interpreter.
SUBPROCESS_SAMPLE = 20


@pytest.fixture(autouse=True, scope="module")
def inflate_limit():
    """Bombs fail fast under a small inflate limit; the real default is 8 GiB."""
    old = os.environ.get("POLYTRACE_MAX_INFLATE_BYTES")
    os.environ["POLYTRACE_MAX_INFLATE_BYTES"] = str(mutations.INFLATE_LIMIT)
    yield
    if old is None:
        del os.environ["POLYTRACE_MAX_INFLATE_BYTES"]
    else:
        os.environ["POLYTRACE_MAX_INFLATE_BYTES"] = old


def snapshot(cur) -> dict:
    """Row counts of every data table and the runs list: what a refused input must not change."""
    counts = {t: cur.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in data_tables(cur)}
    runs = cur.execute("SELECT run_id, name, format, sha256 FROM runs ORDER BY run_id").fetchall()
    return {"counts": counts, "runs": runs}


def good_db(path: Path) -> Path:
    """A database that already holds one run, so 'unchanged' is a claim about real rows."""
    (name, data), = PACKED.files.items()
    src = path.parent / "good" / name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data.replace(b'"input": 10', b'"input": 11'))
    con = store.open(path)
    try:
        ingest_paths(con, [src])
    finally:
        con.close()
    return path


def cli_args(case: Case, root: Path, db: Path) -> list[str]:
    args = ["ingest", *map(str, dump(case, root)), "--db", str(db)]
    return args + ["--format", case.forced] if case.forced else args


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def refusal_problem(rc, out: str, err: str) -> str | None:
    lines = err.splitlines()
    if rc == 0:
        return None
    if rc != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in err:
        return f"exit {rc}, stderr {err[:300]!r}"
    return None


def accepted_problem(con, run_ids: list[str]) -> str | None:
    """An accepted input must be a real run with rows; it is then deleted."""
    for run_id in run_ids:
        found = con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0]
        rows = sum(con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id = ?', [run_id]).fetchall()[0][0]
                   for t in data_tables(con))
        if not found or not rows:
            return f"accepted but run {run_id!r} has {found} runs row(s) and {rows} data rows"
        delete_run(con, run_id)
    return None


def report(where: str, fmt: str, tally: Counter, seconds: float) -> None:
    parsed = f", {tally['parsed']} parsed but refused at load ({LOAD_ONLY[fmt]})" if fmt in LOAD_ONLY else ""
    print(f"\ncorpus {where} {fmt}: {sum(tally.values())} cases tried, {tally['refused']} refused{parsed}, "
          f"{tally['accepted']} accepted (random mutations that stayed valid), {seconds:.1f}s")


def test_every_format_has_a_seed():
    assert set(FORMATS) <= set(seeds()), f"no corpus seed for {set(FORMATS) - set(seeds())}"


def outcome(case: Case, accepted: bool, error: str) -> tuple[str, str | None]:
    """(tally bucket, problem or None) for one case's result."""
    if accepted:
        return "accepted", "accepted an input designed to be invalid" if case.must_reject else None
    if case.format in LOAD_ONLY and LOAD_ONLY[case.format] in error:
        return "parsed", "the parser let an input designed to be invalid through" if case.must_reject else None
    return "refused", None


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_refuses_bad_input(fmt, tmp_path):
    """In-process `polytrace ingest` on every CLI_EVERY-th case (each call opens the database: ~0.2 s)."""
    cases = build(fmt)
    assert len(cases) >= 200
    db = good_db(tmp_path / "cli.duckdb")
    con = store.open(db)
    before = snapshot(con)
    con.close()
    tally, problems, started = Counter(), [], time.perf_counter()
    for i, case in enumerate(cases[::CLI_EVERY]):
        rc, out, err = run_cli(cli_args(case, tmp_path / f"case{i}", db))
        bucket, problem = outcome(case, rc == 0, err)
        problem = problem or refusal_problem(rc, out, err)
        if rc == 0 and not problem:
            con = store.open(db)
            try:
                problem = accepted_problem(con, out.split())
            finally:
                con.close()
        tally[bucket] += 1
        if problem:
            problems.append(f"{case.kind}: {problem}")
    report("CLI", fmt, tally, time.perf_counter() - started)
    con = store.open(db)
    after = snapshot(con)
    con.close()
    assert not problems, "\n".join(problems)
    assert after == before


def test_cli_subprocess_sample(tmp_path):
    """A sample through a real `polytrace` process: exit 2, one `error:` line, no traceback."""
    every = [c for fmt in FORMATS for c in build(fmt) if c.must_reject]
    sample = every[:: max(1, len(every) // SUBPROCESS_SAMPLE)][:SUBPROCESS_SAMPLE]
    db = good_db(tmp_path / "sub.duckdb")
    env = {**os.environ, "POLYTRACE_MAX_INFLATE_BYTES": str(mutations.INFLATE_LIMIT)}
    problems = []
    for i, case in enumerate(sample):
        proc = subprocess.run([sys.executable, "-m", "polytrace", *cli_args(case, tmp_path / f"c{i}", db)],
                              capture_output=True, text=True, env=env, timeout=120)
        problem = refusal_problem(proc.returncode, proc.stdout, proc.stderr) or (
            "accepted" if proc.returncode == 0 else None)
        if problem:
            problems.append(f"{case.format} {case.kind}: {problem}")
    print(f"\ncorpus CLI subprocesses: {len(sample)} cases tried")
    assert len(sample) == SUBPROCESS_SAMPLE
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from polytrace.settings import Settings

    db = good_db(tmp_path_factory.mktemp("api") / "server.duckdb")
    with LiveServer(Settings(db=str(db))) as srv:
        yield srv


def api_snapshot(srv) -> dict:
    return srv.app.state.db.read(snapshot, 30_000, "snapshot")


def api_must_reject(case: Case) -> bool:
    """Several uploaded files ingest like a directory, where a file no format recognises is
    skipped: without a format given, only a single file is bound to be refused."""
    return case.must_reject and (case.forced is not None or len(case.uploads()) == 1)


def api_cases(fmt: str) -> list[Case]:
    """A seeded sample of the others, not a stride: the cases cycle through the format's seeds,
    and a stride would take the same seed each time."""
    cases = build(fmt)
    others = [c for c in cases if not api_must_reject(c)]
    kept = sorted(random.Random(fmt).sample(range(len(others)), len(others) // API_OTHERS_EVERY))
    return [c for c in cases if api_must_reject(c)] + [others[i] for i in kept]


@pytest.mark.parametrize("fmt", FORMATS)
def test_api_refuses_bad_input(fmt, server):
    cases = api_cases(fmt)
    before = api_snapshot(server)
    listed = httpx.get(f"{server.url}/api/runs").json()["runs"]
    tally, problems, started = Counter(), [], time.perf_counter()
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for case in cases:
            files = [("file", (name, data, "application/octet-stream")) for name, data in case.uploads()]
            r = client.post("/api/runs", files=files, data={"format": case.forced} if case.forced else {})
            accepted = r.status_code in (200, 201)
            body = r.json()
            bucket, problem = outcome(replace(case, must_reject=api_must_reject(case)), accepted,
                                      "" if accepted else str(body.get("error")))
            tally[bucket] += 1
            if accepted:
                run_id = body["run_id"]
                detail = client.get(f"/api/runs/{run_id}").json()
                if not problem and (not detail.get("ok") or not sum(detail["rows"].values())):
                    problem = f"accepted but GET gives {detail}"
                client.delete(f"/api/runs/{run_id}").raise_for_status()
            elif not 400 <= r.status_code < 500 or body != {
                    "ok": False, "error": body.get("error"), "status": r.status_code} \
                    or not isinstance(body["error"], str) or "\n" in body["error"]:
                problem = f"{r.status_code} {r.text[:300]}"
            if problem:
                problems.append(f"{case.kind}: {problem}")
    report("API", fmt, tally, time.perf_counter() - started)
    assert not problems, "\n".join(problems)
    assert api_snapshot(server) == before
    assert httpx.get(f"{server.url}/api/runs").json()["runs"] == listed

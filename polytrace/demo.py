"""`polytrace demo`: synthesize realistic runs into a fresh database, with no input files."""
from __future__ import annotations

import tempfile
from pathlib import Path

from polytrace import service, store

# Every demo run's name starts with this; a database holding only such runs may be rebuilt.
DEMO_PREFIX = "demo: "
MATH_RUN = DEMO_PREFIX + "DAPO math, synthetic (4 rollout engines, 8 GPUs)"
AGENT_RUN = DEMO_PREFIX + "tool-use agent, synthetic (multi-turn)"


class DemoDbError(Exception):
    """The database named for the demo holds someone's real runs; the demo will not touch it."""


def _check_replaceable(db: Path) -> None:
    from polytrace.queries.catalog import get_query
    from polytrace.queries.runner import run

    try:
        con = store.open(db, "r")
    except store.StoreError as e:
        raise DemoDbError(f"{db} exists and is not a database the demo may replace ({e})") from None
    try:
        names = run(con, get_query("runs"), {}).table.column("name").to_pylist()
    finally:
        con.close()
    if any(not (n or "").startswith(DEMO_PREFIX) for n in names):
        raise DemoDbError(f"{db} exists and holds runs that are not demo runs; "
                          "pass a new --db path (the demo never overwrites real data)")


def fresh_db_path(db: str | None) -> Path:
    """The demo's database: a new temp file by default; an existing file only if it is a
    previous demo database, which is then replaced."""
    if not db:
        return Path(tempfile.mkdtemp(prefix="polytrace-demo-")) / "demo.duckdb"
    path = Path(db)
    if path.exists():
        _check_replaceable(path)
        path.unlink()
        Path(f"{path}.wal").unlink(missing_ok=True)
    return path


def write_traces(out: Path, seed: int = 0) -> dict[str, Path]:
    """The demo's synthetic trace files, as a user would have them: math/ (a DAPO run's packed
    lengths, reward timings, filter, verl log and profiler traces) and agent/ (multi-turn)."""
    from polytrace.workload import demo as synthetic

    folders = {"math": out / "math", "agent": out / "agent"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    synthetic.write_demo_traces(folders["math"], seed=seed)
    synthetic.write_demo_agent_traces(folders["agent"], seed=seed)
    return folders


def math_facts() -> dict[str, int]:
    """What packed logs do not carry, given as `ingest --max-response-len/--gpus` would give it."""
    from polytrace.workload import demo as synthetic

    return {"max_response_len": synthetic.CAP, "n_gpus": synthetic.DP * synthetic.TP}


def build(db: Path, seed: int = 0) -> list[str]:
    """Write the synthetic traces to a temp dir and ingest them; returns the run ids."""
    from polytrace.workload.whatif import GRID

    con = store.open(db)
    try:
        with tempfile.TemporaryDirectory(prefix="polytrace-demo-traces-") as tmp:
            folders = write_traces(Path(tmp), seed)
            math_run = service.ingest_run(con, [folders["math"]], name=MATH_RUN,
                                          run_overrides=math_facts()).run_id
            # The What if section: the math run simulated under every dispatch policy with
            # the cost model built into the code (calibrated on the shared H200 replay).
            service.simulate_run(con, math_run, calibration=GRID)
            agent_run = service.ingest_run(con, [folders["agent"]], name=AGENT_RUN).run_id
    finally:
        con.close()
    return [math_run, agent_run]

"""`polytrace demo`: synthesize realistic runs into a fresh database, with no input files."""
from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb

from polytrace import store
from polytrace.ingest.load import ingest_paths

# Every demo run's name starts with this; a database holding only such runs may be rebuilt.
DEMO_PREFIX = "demo: "
MATH_RUN = DEMO_PREFIX + "DAPO math, synthetic (4 DP ranks)"
AGENT_RUN = DEMO_PREFIX + "tool-use agent, synthetic (multi-turn)"


class DemoDbError(Exception):
    """The database named for the demo holds someone's real runs; the demo will not touch it."""


def _check_replaceable(db: Path) -> None:
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as e:
        raise DemoDbError(f"{db} exists and is not a database the demo may replace "
                          f"({str(e).splitlines()[0]})") from None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM runs").fetchall()]
    except duckdb.Error:
        names = None
    finally:
        con.close()
    real = names is None or any(not (n or "").startswith(DEMO_PREFIX) for n in names)
    if real:
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


def build(db: Path, seed: int = 0) -> list[str]:
    """Write the synthetic traces to a temp dir and ingest them; returns the run ids."""
    from polytrace.workload import demo as synthetic

    con = store.open(db)
    run_ids = []
    try:
        with tempfile.TemporaryDirectory(prefix="polytrace-demo-traces-") as tmp:
            math_dir = Path(tmp) / "math"
            math_dir.mkdir()
            synthetic.write_demo_traces(math_dir, seed=seed)
            # Packed logs do not carry the cap or the GPU count: given as `ingest
            # --max-response-len/--gpus` would give them, so the cap finding shows.
            facts = {"max_response_len": synthetic.CAP, "n_gpus": synthetic.DP * synthetic.TP}
            run_ids.append(ingest_paths(con, [math_dir], name=MATH_RUN, run_overrides=facts).run_id)
            # The What if section: the math run simulated under every dispatch policy with
            # the cost model built into the code (calibrated on the shared H200 replay).
            from polytrace.workload.whatif import simulate_and_store
            simulate_and_store(con, run_ids[0])
            agent_dir = Path(tmp) / "agent"
            agent_dir.mkdir()
            synthetic.write_demo_agent_traces(agent_dir, seed=seed)
            run_ids.append(ingest_paths(con, [agent_dir], name=AGENT_RUN).run_id)
    finally:
        con.close()
    return run_ids

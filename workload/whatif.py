"""Simulation results for the catalog (the whatif table) and their comparison with measured engine times."""
from __future__ import annotations

import pyarrow as pa

from polytrace.store.runs import changed
from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import H200_REPLAY_GRID, CostModel

DEFAULT_POLICIES = ("as-recorded", "round-robin", "length-balanced", "predicted-balanced",
                    "partial-rollout:0.9")
WHATIF_COLUMNS = ("step", "policy", "engine", "n", "tokens", "max_len", "predicted_s", "idle_frac",
                  "speedup")


FORECAST_COLUMNS = ("step", "stage", "measured_s", "predicted_s", "fit_steps", "model")
CARRY_COLUMNS = ("step", "policy", "carried", "carried_tokens")


def store(con, run_id: str, rows: list[dict], calibration: str, forecast: list[dict] | None = None) -> int:
    """Replace the run's stored results for the simulated policies, in one transaction.

    Rows of another calibration go too: every policy's speedup is against the as-recorded
    rows, so one run's table holds one calibration. The engines:xK what-if is not stored:
    the whatif queries count GPU-hours at the job's GPU count, which more engines change.
    A forecast (genfit's forward validation) replaces the run's gen_forecast rows.
    """
    rows = [r for r in rows if not r["policy"].startswith("engines:")]
    policies = sorted({r["policy"] for r in rows})
    carry = [r for r in rows if "carried" in r]
    tables = {"_whatif": pa.table({c: [r.get(c) for r in rows] for c in WHATIF_COLUMNS}),
              "_carry": pa.table({c: [r.get(c) for r in carry] for c in CARRY_COLUMNS})}
    if forecast is not None:
        tables["_forecast"] = pa.table({c: [r.get(c) for r in forecast] for c in FORECAST_COLUMNS})
    con.execute("BEGIN TRANSACTION")
    try:
        changed(con, run_id)
        con.execute("DELETE FROM whatif WHERE run_id = ? AND (list_contains(?, policy) "
                    "OR calibration IS DISTINCT FROM ?)", [run_id, policies, calibration])
        for name, data in tables.items():
            con.register(name, data)
        con.execute("INSERT INTO whatif BY NAME SELECT ? AS run_id, *, ? AS calibration FROM _whatif",
                    [run_id, calibration])
        con.execute("DELETE FROM whatif_carry WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO whatif_carry BY NAME SELECT ? AS run_id, * FROM _carry", [run_id])
        if forecast is not None:
            con.execute("DELETE FROM gen_forecast WHERE run_id = ?", [run_id])
            con.execute("INSERT INTO gen_forecast BY NAME SELECT ? AS run_id, * FROM _forecast", [run_id])
        for name in tables:
            con.unregister(name)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(rows)


def can_simulate(con, run_id: str) -> bool:
    """Whether the run has what the simulation needs: samples with a dp_rank and a response length."""
    return con.execute("SELECT 1 FROM samples WHERE run_id = ? AND dp_rank IS NOT NULL "
                       "AND response_len IS NOT NULL LIMIT 1", [run_id]).fetchone() is not None


def timed_rollout(con, run_id: str) -> bool:
    """Whether the run logged its generation time (timing_s/gen, or rank_stage 'gen') in two steps
    or more: what a fit of its own log (workload/genfit.py) needs at least."""
    return con.execute(
        "SELECT count(DISTINCT step) >= 2 FROM (SELECT step FROM canonical_metrics WHERE run_id = $run "
        "AND key = 'timing_s/gen' AND value > 0 UNION ALL SELECT step FROM rank_stage WHERE run_id = $run "
        "AND stage = 'gen' AND seconds > 0)", {"run": run_id}).fetchall()[0][0]


def offer(con, run_id: str) -> str | None:
    """What a simulation of the run would start from, as POST /api/runs/{id}/whatif tries them:
    'log' (a fit of its timed rollout; one too thin to fit is said when asked for), 'grid' (the
    built-in cost model over its per-rank lengths), or None."""
    if timed_rollout(con, run_id):
        return "log"
    return "grid" if can_simulate(con, run_id) else None


def simulate_and_store(con, run_id: str, model: CostModel = H200_REPLAY_GRID,
                       policies: tuple[str, ...] = DEFAULT_POLICIES) -> int:
    """Simulate a run under the default policies and store the results, e.g. right after a demo ingest."""
    from polytrace.workload.simulate import load_steps, simulate

    return store(con, run_id, simulate(load_steps(con, run_id), model, list(policies)), model.source)


def compare(rows: list[dict], measured: dict[tuple[int, int], float]) -> tuple[list[dict], float]:
    """Per measured engine and per step: predicted vs measured; and accuracy = 100 - mean |error %|.

    Only as-recorded rows are compared: that is the layout the measurement ran.
    """
    predicted = {(r["step"], r["engine"]): r["predicted_s"] for r in rows
                 if r["policy"] == "as-recorded" and r["engine"] is not None}
    out, errors = [], []
    for step in sorted({s for s, _ in measured}):
        engines = sorted(e for s, e in measured if s == step)
        if any((step, e) not in predicted for e in engines):
            raise WorkloadError(f"step {step}: the run has no as-recorded prediction for every measured engine")
        for e in engines:
            err = (predicted[(step, e)] - measured[(step, e)]) / measured[(step, e)] * 100
            errors.append(abs(err))
            out.append({"step": step, "engine": e, "measured_s": measured[(step, e)],
                        "predicted_s": predicted[(step, e)], "error_pct": err})
        m_idle = _idle([measured[(step, e)] for e in engines])
        p_idle = _idle([predicted[(step, e)] for e in engines])
        m_step = max(measured[(step, e)] for e in engines)
        p_step = max(predicted[(step, e)] for e in engines)
        out.append({"step": step, "engine": None, "measured_s": m_step, "predicted_s": p_step,
                    "error_pct": (p_step - m_step) / m_step * 100, "measured_idle_frac": m_idle,
                    "predicted_idle_frac": p_idle, "idle_error_pp": (p_idle - m_idle) * 100})
    return out, 100 - sum(errors) / len(errors)


def _idle(times: list[float]) -> float:
    return 1 - sum(times) / (len(times) * max(times))

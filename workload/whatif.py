"""What if: the one simulation policy (which calibration, policies and engine counts a simulation of
a run uses, for the CLI and REST alike), its results for the catalog (the whatif table) and their
comparison with measured engine times."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from polytrace.store.runs import changed
from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import H200_REPLAY_GRID, CostModel
from polytrace.workload import overlap

DEFAULT_POLICIES = ("as-recorded", "round-robin", "length-balanced", "predicted-balanced",
                    "partial-rollout:0.9")
WHATIF_COLUMNS = ("step", "policy", "engine", "n", "tokens", "max_len", "predicted_s", "idle_frac",
                  "speedup")


FORECAST_COLUMNS = ("step", "stage", "measured_s", "predicted_s", "fit_steps", "model")
CARRY_COLUMNS = ("step", "policy", "carried", "carried_tokens")


def store(con, run_id: str, rows: list[dict], calibration: str, forecast: list[dict] | None = None,
          async_rows: list[dict] | None = None) -> int:
    """Replace the run's stored results for the simulated policies, in one transaction.

    Rows of another calibration go too: every policy's speedup is against the as-recorded
    rows, so one run's table holds one calibration. The engines:xK what-if is not stored:
    the whatif queries count GPU-hours at the job's GPU count, which more engines change.
    A forecast (genfit's forward validation) replaces the run's gen_forecast rows, and the async
    what-if of a log fit (workload/overlap.py) its whatif_async rows.
    """
    rows = [r for r in rows if not r["policy"].startswith("engines:")]
    policies = sorted({r["policy"] for r in rows})
    carry = [r for r in rows if "carried" in r]
    tables = {"_whatif": pa.table({c: [r.get(c) for r in rows] for c in WHATIF_COLUMNS}),
              "_carry": pa.table({c: [r.get(c) for r in carry] for c in CARRY_COLUMNS})}
    if forecast is not None:
        tables["_forecast"] = pa.table({c: [r.get(c) for r in forecast] for c in FORECAST_COLUMNS})
    if async_rows is not None:
        tables["_overlap"] = pa.table({c: [r.get(c) for r in async_rows] for c in overlap.COLUMNS})
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
        if async_rows is not None:
            con.execute("DELETE FROM whatif_async WHERE run_id = ?", [run_id])
            con.execute("INSERT INTO whatif_async BY NAME SELECT ? AS run_id, * FROM _overlap", [run_id])
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


GRID = "grid"  # the calibration that names the built-in cost model
Engines = tuple[str, float]  # ("=", count) or ("x", multiple of the recorded engines)


@dataclass
class Simulation:
    """A run simulated: the whatif rows, the policies asked, the calibration they are stored under,
    the forward validation of a log fit, the cost model (per-sample runs), the log fit itself and
    the async what-if of a per-step log fit (workload/overlap.py; None when not simulated)."""

    rows: list[dict]
    policies: list[str]
    calibration: str
    forecast: list[dict] | None = None
    model: CostModel | None = None
    log_fit: Any = None  # genfit.LogCalibration with --calibration log or auto
    stored: int | None = None  # whatif rows stored (service.simulate_run)
    overlap: list[dict] | None = None


def simulation(con, run_id: str, calibration: str = "auto", policies: list[str] | None = None,
               engines: Engines | None = None, engine_speed: str = "uniform",
               model: CostModel | None = None) -> Simulation:
    """Simulate a run under dispatch policies, without storing anything.

    calibration "log" fits the gen time to the run's own steps (workload/genfit.py), validated
    forward; "grid" is the cost model built into the code (H200_REPLAY_GRID); a file is a cost
    model (calib.json grid or iters.jsonl), `model` when the caller loaded it already. "auto",
    what POST /api/runs/{id}/whatif does, takes the log fit when the run timed its rollout and
    the fit holds, else the grid, and only the default what-ifs of either (no half-cap or
    x2-engines row: those are the CLI's `--calibration log` defaults)."""
    if model is None and calibration == "auto":
        return _auto(con, run_id)
    if model is None and calibration == GRID:
        return _on_grid(con, run_id, policies)
    if model is None and calibration == "log":
        return _from_log(con, run_id, policies, engines)
    from polytrace.workload import costmodel, simulate

    model = model or costmodel.load(Path(calibration))
    if engine_speed == "uniform":
        model = dataclasses.replace(model, speed={})
    count = engines_for_samples(con, run_id, engines)
    rows = simulate.simulate(simulate.load_steps(con, run_id), model, policies or list(DEFAULT_POLICIES), count)
    return Simulation(rows, policies or list(DEFAULT_POLICIES), calibration, model=model)


def _on_grid(con, run_id: str, policies: list[str] | None) -> Simulation:
    from polytrace.workload import simulate

    policies = policies or list(DEFAULT_POLICIES)
    rows = simulate.simulate(simulate.load_steps(con, run_id), H200_REPLAY_GRID, policies)
    return Simulation(rows, policies, H200_REPLAY_GRID.source, model=H200_REPLAY_GRID)


def _from_log(con, run_id: str, policies: list[str] | None, engines: Engines | None) -> Simulation:
    from polytrace.workload import genfit, simulate

    cal = genfit.calibrate(con, run_id)
    if cal.kind == "engine":
        count = engines_for_samples(con, run_id, engines)
        policies = policies or [*DEFAULT_POLICIES, half_cap(con, run_id)]
        rows = simulate.simulate(simulate.load_steps(con, run_id), cal.cost_model, policies, count)
    else:
        policies = policies or step_policies(cal)
        caps = step_caps(policies)
        rows = step_rows(cal, caps, [_multiple(_per_step_engines(engines))])
    return Simulation(rows, policies, "log", cal.forecast, cal.cost_model, cal, overlap=_overlap(con, run_id, cal))


def _auto(con, run_id: str) -> Simulation:
    from polytrace.workload import genfit, simulate

    try:
        cal = genfit.calibrate(con, run_id) if timed_rollout(con, run_id) else None
    except WorkloadError:
        cal = None  # too little to fit: the grid, or the error saying what the grid needs
    if cal is None and not can_simulate(con, run_id):
        raise WorkloadError(f"run {run_id!r} has no samples with a dp_rank: the simulation needs "
                            "per-rank response lengths")
    if cal is not None and cal.kind == "step":
        policies = step_policies(cal)
        return Simulation(step_rows(cal, step_caps(policies), []), policies, "log", cal.forecast, log_fit=cal,
                          overlap=_overlap(con, run_id, cal))
    if cal is None:
        return _on_grid(con, run_id, None)
    rows = simulate.simulate(simulate.load_steps(con, run_id), cal.cost_model, list(DEFAULT_POLICIES))
    return Simulation(rows, list(DEFAULT_POLICIES), "log", cal.forecast, cal.cost_model, cal)


def _overlap(con, run_id: str, cal) -> list[dict] | None:
    """The async what-if of a per-step log fit; None (nothing simulated) for any other fit."""
    return overlap.whatif(con, run_id, cal) if cal.kind == "step" else None


def step_policies(cal) -> list[str]:
    """The default what-ifs of a per-step (verl log) fit: as recorded, and half the response cap."""
    return ["as-recorded", f"cap:{max(1, int(cal.steps.span) // 2)}"]


def step_rows(cal, caps: list[float], multiples: list[float]) -> list[dict]:
    """What-if rows of a per-step fit: as-recorded, each cap, and each engine multiple."""
    from polytrace.workload import genfit

    return genfit.step_whatif(cal.steps, cal.step_model, caps, [(f"x{k:g}", k) for k in multiples])


def step_caps(policies: list[str]) -> list[float]:
    """The caps of a per-step fit's what-ifs; any dispatch policy among them is an error."""
    from polytrace.workload import simulate

    caps, unsupported = [], []
    for name in policies:
        if name.startswith("cap:"):
            caps.append(simulate.parse_cap(name))
        elif name != "as-recorded":
            unsupported.append(name)
    if unsupported:
        raise WorkloadError(f"{', '.join(unsupported)}: dispatch policies need per-sample lengths with dp "
                            "ranks, and this run has step metrics only; with --calibration log it "
                            "simulates as-recorded, cap:C and --engines xK")
    return caps


def _per_step_engines(engines: Engines | None) -> Engines:
    engines = engines or ("x", 2.0)
    if engines[0] == "=":
        raise WorkloadError("the log does not say how many rollout engines the run used: give --engines "
                            "as a multiple of them, e.g. --engines x2")
    return engines


def _multiple(engines: Engines) -> float:
    if not engines[1] > 0:
        raise WorkloadError(f"--engines x{engines[1]:g}: the multiple must be positive")
    return engines[1]


def half_cap(con, run_id: str) -> str:
    """The default cap what-if of a per-sample run: half its cap (or half its longest response)."""
    cap = con.execute("SELECT coalesce((SELECT max_response_len FROM runs WHERE run_id = ?), "
                      "(SELECT max(response_len) FROM samples WHERE run_id = ?))", [run_id, run_id]).fetchone()[0]
    return f"cap:{max(1, int(cap or 2) // 2)}"


def engines_for_samples(con, run_id: str, engines: Engines | None) -> int | None:
    """An absolute engine count for the per-sample simulation; xK scales the run's dp ranks. An
    engine beyond the largest step's samples would only sit idle (and cost the simulation its
    time and memory), so a count past them is refused."""
    if engines is None:
        return None
    if engines[0] == "=":
        count = int(engines[1])
        if count < 1:
            raise WorkloadError(f"--engines must be at least 1, got {count}")
    else:
        recorded = con.execute("SELECT 1 + max(dp_rank) FROM samples WHERE run_id = ?", [run_id]).fetchone()[0]
        count = max(1, round(_multiple(engines) * (recorded or 1)))
    most = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM samples WHERE run_id = ? GROUP BY step)",
                       [run_id]).fetchone()[0]
    if most is not None and count > most:
        given = f"{count:,} engines" if engines[0] == "=" else f"x{engines[1]:g} means {count:,} engines"
        raise WorkloadError(f"--engines {given}, more than the {most:,} samples of the run's largest step: "
                            "an engine without a sample only sits idle")
    return count


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

"""The generation-time model fitted to a run's own log (`simulate --calibration log`), and its forward validation."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import CostModel
from polytrace.workload.genfit import (
    StepModel,
    StepSeries,
    calibrate,
    fit_steps,
    forward_steps,
    load_step_series,
    mape,
    naive_baseline,
    robust_fit,
    step_whatif,
    step_work,
)
from polytrace.workload.simulate import finish_times, load_steps, simulate
from polytrace.workload.traces import packed_lines, write_jsonl

VERL_LOGS = Path("verl-logs")
DAPO = Path("polytrace/verl/profile/packed_length_log/20260614_023133")
# t0, t_sync, a, b, c, p of the hand-made series
TRUTH = (2.0, 0.5, 0.01, 2e-5, 3e-9, 1e-6)


def by_formula(L, m, pm, n, synced, tool, coef=TRUTH):
    """gen_s written out from the documented formula, independently of genfit."""
    t0, t_sync, a, b, c, p = coef
    e1 = m * (1 - math.exp(-L / m))
    e2 = 2 * m * m * (1 - math.exp(-L / m) * (1 + L / m))
    return t0 + t_sync * synced + tool + a * L + b * n * e1 + c * n * (pm * e1 + e2 / 2) + p * n * pm


def series(rows: list[tuple], coef=TRUTH) -> StepSeries:
    """A StepSeries of (L, mean response, mean prompt, samples, synced, tool) rows, gen by the formula."""
    a = np.array(rows, float)
    gen = [by_formula(*r, coef=coef) for r in rows]
    return StepSeries(step=np.arange(len(rows)), gen=np.array(gen), longest=a[:, 0], resp_mean=a[:, 1],
                      prompt_mean=a[:, 2], n=a[:, 3], synced=a[:, 4], tool=a[:, 5],
                      clip=np.zeros(len(rows)), span=8192.0, sources={"n": "perf/total_num_tokens"})


HAND = [  # L, m, prompt, n, synced, tool: twelve steps that move every column on its own
    (8192, 1500, 300, 1024, 1, 0.0), (4000, 900, 310, 1024, 1, 5.0), (8192, 2100, 280, 960, 0, 0.0),
    (2500, 700, 350, 1100, 1, 30.0), (6000, 1800, 320, 1024, 1, 0.0), (8192, 1200, 500, 800, 1, 2.0),
    (3000, 1000, 250, 1200, 0, 0.0), (7000, 2500, 300, 1024, 1, 60.0), (1500, 400, 420, 900, 1, 0.0),
    (8192, 1900, 260, 1150, 1, 1.0), (5000, 1300, 380, 1000, 1, 0.0), (8192, 2200, 330, 1050, 0, 10.0),
]


# ---------------------------------------------------------------- the per-step model by hand


def test_work_terms_by_hand():
    # m = 100 and L = 100 ln 2: exp(-L/m) = 1/2, so E[min(l, L)] = 100 * (1 - 1/2) = 50 and
    # E[min(l, L)^2] = 2 * 100^2 * (1 - (1 + ln 2) / 2) = 10000 * (1 - ln 2) = 3068.528...
    # With 10 samples and prompts of 20: R = 10 * 50 = 500, K = 10 * (20 * 50 + 3068.53 / 2)
    # = 25342.64, P = 10 * 20 = 200.
    s = series([(100 * math.log(2), 100, 20, 10, 1, 0.0)])
    L, R, K, P = step_work(s)
    assert (L[0], R[0], P[0]) == pytest.approx((100 * math.log(2), 500.0, 200.0))
    assert K[0] == pytest.approx(10 * (20 * 50 + 10000 * (1 - math.log(2)) / 2))
    # A cap at 100 ln 2 / 2 tokens cuts L; above the recorded longest nothing changes (no clipping)
    assert step_work(s, cap=50 * math.log(2))[0][0] == pytest.approx(50 * math.log(2))
    assert step_work(s, cap=1000)[0][0] == pytest.approx(100 * math.log(2))


def test_a_series_made_by_the_formula_is_recovered():
    s = series(HAND)
    model = fit_steps(s)
    assert model.coef == pytest.approx(TRUTH, rel=1e-6)
    assert model.predict(s) == pytest.approx(s.gen, rel=1e-9)


def test_one_wild_step_does_not_drag_the_fit():
    # Step 3's gen is ten times the formula (a hung tool, say). The soft-L1 fit on relative
    # error keeps the other steps within 3%; a least-squares line through it would not.
    s = series(HAND * 2)
    s.gen[3] *= 10
    model = fit_steps(s)
    others = np.arange(len(s)) != 3
    assert mape(s.gen[others], model.predict(s)[others]) < 3.0


def test_robust_fit_drops_what_the_data_cannot_tell_apart():
    # The indicator (column 1) is 1 everywhere: no different from the intercept, so it gets 0.
    # The all-zero column gets 0 too. y = 3 + 2 x.
    x = np.array([1.0, 2.0, 3.0, 4.0])
    X = np.stack([np.ones(4), np.ones(4), x, np.zeros(4)], axis=1)
    assert robust_fit(X, 3 + 2 * x) == pytest.approx([3.0, 0.0, 2.0, 0.0], abs=1e-9)
    # An offset is taken off first and never fitted: y - offset = 3 + 2 x.
    assert robust_fit(X, 3 + 2 * x + 10, offset=np.full(4, 10.0)) == pytest.approx([3, 0, 2, 0], abs=1e-9)


def test_what_if_cap_and_engines_by_hand():
    # Only a (0.01 s per iteration) and b (1e-3 s per live sample per iteration), t0 = 1.
    # Step: L = 1000, m = 1000 (so E[min(l, L)] = 1000 (1 - 1/e)), 100 samples, no prompt.
    # As recorded: 1 + 0.01 * 1000 + 1e-3 * 100 * 632.12 = 11 + 63.212 = 74.212 s.
    # At cap 500: 1 + 5 + 1e-3 * 100 * 1000 (1 - e^-0.5) = 6 + 39.347 = 45.347 s.
    # At 2x engines: 1 + 10 + 63.212 / 2 = 42.606 s. The tool time (7 s) adds to each.
    s = series([(1000, 1000, 0, 100, 1, 7.0)])
    model = StepModel((1.0, 0.0, 0.01, 1e-3, 0.0, 0.0))
    rows = {r["policy"]: r for r in step_whatif(s, model, [500], [("x2", 2.0)])}
    recorded = 7 + 11 + 100 * (1 - math.exp(-1))
    assert rows["as-recorded"]["predicted_s"] == pytest.approx(recorded)
    assert rows["cap:500"]["predicted_s"] == pytest.approx(7 + 6 + 100 * (1 - math.exp(-0.5)))
    assert rows["engines:x2"]["predicted_s"] == pytest.approx(7 + 11 + 50 * (1 - math.exp(-1)))
    assert rows["cap:500"]["max_len"] == 500 and rows["engines:x2"]["max_len"] == 1000
    assert rows["cap:500"]["speedup"] == pytest.approx(recorded / rows["cap:500"]["predicted_s"])
    # tokens at the cap: 100 * 1000 * (1 - e^-0.5) / (1 - e^(-8192/1000)), lengths exponential
    assert rows["cap:500"]["tokens"] == round(1e5 * (1 - math.exp(-0.5)) / (1 - math.exp(-8.192)))


def test_naive_baseline_by_hand():
    # First half: gen = 2 L + 1 exactly. Second half: measured 10% above that line.
    L = np.array([10.0, 20, 30, 40, 50, 60])
    gen = np.concatenate([2 * L[:3] + 1, 1.1 * (2 * L[3:] + 1)])
    assert naive_baseline(gen, L) == pytest.approx(100 * (1 - 1 / 1.1))


# ---------------------------------------------------------------- forward validation


def test_forward_rows_cover_the_second_half_from_earlier_steps_only():
    s = series(HAND)
    rows = forward_steps(s)
    assert [r["step"] for r in rows] == list(range(6, 12))
    assert [r["fit_steps"] for r in rows] == list(range(6, 12))
    assert {r["stage"] for r in rows} == {"gen"} and {r["model"] for r in rows} == {"log:step"}
    # Changing step 9's measured time cannot move the predictions of steps 6 to 9: each was
    # fitted on the steps before it. Step 10's moves: step 9 is in its window.
    changed = series(HAND)
    changed.gen[9] *= 3
    again = forward_steps(changed)
    assert [r["predicted_s"] for r in again[:4]] == [r["predicted_s"] for r in rows[:4]]
    assert again[3]["measured_s"] == 3 * rows[3]["measured_s"]
    assert again[4]["predicted_s"] != rows[4]["predicted_s"]
    # Changing its lengths too moves its own prediction, still none before it.
    changed.longest[9] = 100
    again = forward_steps(changed)
    assert [r["predicted_s"] for r in again[:3]] == [r["predicted_s"] for r in rows[:3]]
    assert again[3]["predicted_s"] != rows[3]["predicted_s"]


def test_forward_prediction_is_the_fit_of_the_window():
    # Step 8's prediction is exactly what a model fitted on steps 0..7 says about step 8.
    s = series(HAND, coef=(1.0, 0.3, 0.02, 1e-5, 0.0, 0.0))
    s.gen = s.gen * (1 + 0.03 * np.sin(np.arange(len(s))))  # not an exact fit: windows differ
    rows = {r["step"]: r["predicted_s"] for r in forward_steps(s)}
    assert rows[8] == pytest.approx(fit_steps(s.take(slice(0, 8))).predict(s.take([8]))[0], rel=1e-12)


# ---------------------------------------------------------------- from a verl log, through the CLI


def verl_log(path: Path, rows: list[tuple], validate_after: int | None = None, end: str = "\n") -> Path:
    """A verl console log of (L, m, prompt, n, synced, tool) steps, gen by the formula.

    With agent-loop keys (slowest sample's length and tool time); validate_after adds
    val-core metrics to that step's line. Total tokens = n * (prompt + m). end="" leaves the
    last line unfinished, as a crashed run does.
    """
    lines = ["(TaskRunner pid=1) Training from scratch"]
    for step, (L, m, pm, n, synced, tool) in enumerate(rows, start=1):
        pairs = {"timing_s/gen": by_formula(L, m, pm, n, synced, tool), "response_length/mean": m,
                 "response_length/max": L, "response_length/clip_ratio": 0.0, "prompt_length/mean": pm,
                 "perf/total_num_tokens": n * (pm + m),
                 "timing_s/agent_loop/slowest/response_length": L,
                 "timing_s/agent_loop/slowest/tool_calls": f"np.float64({tool})"}
        if step == validate_after:
            pairs["val-core/acc/mean@1"] = 0.5
        lines.append(f"(TaskRunner pid=1) step:{step} - " + " - ".join(f"{k}:{v}" for k, v in pairs.items()))
    path.write_text("\n".join(lines) + end)
    return path


def test_cli_forward_json_shape_and_store(tmp_path, db_path, con, capsys):
    # Only step 4 skips the weight sync: it follows the validation logged with step 3.
    rows = [(*r[:4], 0 if i == 3 else 1, r[5]) for i, r in enumerate(HAND)]
    log = verl_log(tmp_path / "output.log", rows, validate_after=3)
    run = ingest_paths(con, [log]).run_id
    s = load_step_series(con, run)
    assert list(s.synced) == [1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--validate", "forward",
                 "--output", "json", "--store"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert [set(r) for r in printed] == [{"step", "stage", "measured_s", "predicted_s"}] * 6
    assert [r["step"] for r in printed] == [7, 8, 9, 10, 11, 12] and {r["stage"] for r in printed} == {"gen"}
    # The log was made by the formula: each window of six or more steps recovers it
    assert [r["predicted_s"] for r in printed] == pytest.approx([r["measured_s"] for r in printed], rel=1e-6)
    assert "forward validation: MAPE 0.0% over 6 step(s)" in err
    c = store.open(db_path, "r")
    try:
        stored = c.execute("SELECT step, stage, measured_s, predicted_s, fit_steps, model FROM gen_forecast "
                           "WHERE run_id = ? ORDER BY step", [run]).fetchall()
        whatif = dict(c.execute("SELECT policy, count(*) FROM whatif WHERE run_id = ? AND calibration = 'log' "
                                "GROUP BY policy", [run]).fetchall())
    finally:
        c.close()
    assert [(r[0], r[1], r[4], r[5]) for r in stored] == [(st, "gen", k, "log:step")
                                                         for st, k in zip(range(7, 13), range(6, 12))]
    assert [r[2] for r in stored] == [r["measured_s"] for r in printed]
    # cap at half the span (8192, the longest L); engines:x2 is printed, not stored (more GPUs)
    assert whatif == {"as-recorded": 12, "cap:4096": 12}


def test_a_step_whose_line_was_cut_is_left_out(tmp_path, con):
    # The last line has no newline: its last value may be cut short, so step 12 is not fitted.
    run = ingest_paths(con, [verl_log(tmp_path / "output.log", HAND, end="")]).run_id
    s = load_step_series(con, run)
    assert list(s.step) == list(range(1, 12))
    assert s.sources["longest"] == "timing_s/agent_loop/slowest/response_length"
    assert s.tool[7] == 60.0 and s.n[0] == pytest.approx(1024)


def test_cli_what_if_rows_and_their_errors(tmp_path, db_path, con, capsys):
    run = ingest_paths(con, [verl_log(tmp_path / "output.log", HAND)]).run_id
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--policy", "as-recorded",
                 "--policy", "cap:2048", "--engines", "x4", "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in rows} == {"as-recorded", "cap:2048", "engines:x4"}
    capped = {r["step"]: r for r in rows if r["policy"] == "cap:2048"}
    assert capped[1]["max_len"] == 2048 and capped[9]["max_len"] == 1500  # step 9's L is below the cap
    assert capped[9]["speedup"] == pytest.approx(1.0)
    # the terminal table says each column's unit in its header, each header on one line
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--policy", "as-recorded"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "policy" in line)
    assert [h.strip() for h in header.strip("┃").split("┃")] == [
        "step", "policy", "engine", "n (samples)", "tokens (tokens)", "max_len (tokens)", "predicted_s (s)",
        "idle_frac (0–1)", "speedup (×)", "oracle"]
    for args, message in (
            (["--policy", "round-robin"], "round-robin: dispatch policies need per-sample lengths"),
            (["--engines", "16"], "give --engines as a multiple of them, e.g. --engines x2"),
            (["--policy", "cap:0"], "cap:C needs a response-length cap C >= 1")):
        assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert main(["simulate", run, "--db", str(db_path), "--calibration", str(tmp_path / "calib.json"),
                 "--validate", "forward"]) == 2
    assert "--validate forward checks a model fitted to the run's own log" in capsys.readouterr().err


def test_a_run_without_gen_time_is_refused(tmp_path, db_path, con, capsys):
    trace = tmp_path / "run"
    write_jsonl(trace / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5, 5]), np.full((2, 2), 10), np.array([0, 1]), tp=1))
    run = ingest_paths(con, [trace]).run_id
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log"]) == 2
    err = capsys.readouterr().err
    assert "has no generation time to fit" in err and err.count("\n") == 1


# ---------------------------------------------------------------- per engine: samples + rank_stage gen


ENGINE_TRUTH = CostModel(a=0.01, b=0.002, c=1e-6, p0=0.5, p1=1e-4)


def engine_run(tmp_path, con, steps: int = 6) -> str:
    """A packed run of two engines whose rank_stage gen times are ENGINE_TRUTH's finish times."""
    rng = np.random.default_rng(4)
    trace = tmp_path / "packed"
    for step in range(steps):
        inputs = rng.integers(20, 400, size=8)
        outputs = rng.integers(1, 3000, size=(8, 4))
        write_jsonl(trace / f"packed_lengths_step_{step}.jsonl",
                    packed_lines(step, inputs, outputs, np.array([0, 1] * 4), tp=1))
    run = ingest_paths(con, [trace]).run_id
    for s in load_steps(con, run):
        for e in (0, 1):
            mine = s.dp_rank == e
            seconds = finish_times(ENGINE_TRUTH, s.prompt_len[mine], s.response_len[mine]).max()
            con.execute("INSERT INTO rank_stage (run_id, step, rank, dp_rank, tp_rank, stage, seconds) "
                        "VALUES (?, ?, ?, ?, 0, 'gen', ?)", [run, s.step, e, e, float(seconds)])
    return run


def test_per_engine_fit_recovers_the_cost_model(tmp_path, con):
    run = engine_run(tmp_path, con)
    cal = calibrate(con, run)
    assert cal.kind == "engine"
    m = cal.cost_model
    assert (m.a, m.b, m.c, m.p0, m.p1) == pytest.approx((0.01, 0.002, 1e-6, 0.5, 1e-4), rel=1e-6)
    # Forward rows: the slowest engine of steps 3, 4, 5, measured and predicted from earlier steps
    assert [r["step"] for r in cal.forecast] == [3, 4, 5]
    recorded = simulate(load_steps(con, run), ENGINE_TRUTH, ["as-recorded"])
    slowest = {r["step"]: r["predicted_s"] for r in recorded if r["engine"] is None}
    assert [r["measured_s"] for r in cal.forecast] == pytest.approx([slowest[s] for s in (3, 4, 5)])
    assert cal.forward_mape == pytest.approx(0.0, abs=1e-6)


def test_per_engine_policies_through_the_cli(tmp_path, db_path, con, capsys):
    run = engine_run(tmp_path, con)
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--output", "json",
                 "--store"]) == 0
    rows = json.loads(capsys.readouterr().out)
    longest = max(r["max_len"] for r in rows)
    assert {r["policy"] for r in rows} == {"as-recorded", "round-robin", "length-balanced", "predicted-balanced",
                                           "partial-rollout:0.9", f"cap:{longest // 2}"}
    c = store.open(db_path, "r")
    try:
        calibrations = c.execute("SELECT DISTINCT calibration FROM whatif WHERE run_id = ?", [run]).fetchall()
        models = c.execute("SELECT DISTINCT model FROM gen_forecast WHERE run_id = ?", [run]).fetchall()
    finally:
        c.close()
    assert calibrations == [("log",)] and models == [("log:engine",)]


def test_cap_policy_by_hand():
    # One engine, responses [10, 40], 1 s per iteration: 40 s as recorded, 20 s capped at 20.
    from polytrace.workload.simulate import Step

    step = Step(0, np.array([0, 1]), np.array([0, 0]), np.array([0, 0]), np.array([10, 40]))
    rows = {(r["policy"], r["engine"]): r for r in simulate([step], CostModel(a=1.0, b=0.0, c=0.0),
                                                            ["cap:20"])}
    assert rows[("as-recorded", None)]["predicted_s"] == pytest.approx(40.0)
    assert rows[("cap:20", None)]["predicted_s"] == pytest.approx(20.0)
    assert rows[("cap:20", None)]["speedup"] == pytest.approx(2.0)
    with pytest.raises(WorkloadError, match="cap:C needs"):
        simulate([step], CostModel(a=1.0, b=0.0, c=0.0), ["cap:x"])


# ---------------------------------------------------------------- the real logs


@pytest.mark.shared_data
@pytest.mark.parametrize("log", ["qwen3-4b-agent-run-i80f2v90", "qwen3-4b-agent-run-ry3hgbx5"])
def test_real_log_forward_error_is_within_target(shared_data, con, log):
    run = ingest_paths(con, [shared_data / VERL_LOGS / f"{log}.output.log"]).run_id
    cal = calibrate(con, run)
    assert cal.kind == "step" and len(cal.forecast) >= 80
    # Validation steps (every tenth) lose their timings to W&B's 4096-character cut: never predicted
    assert all(r["step"] % 10 for r in cal.forecast)
    assert cal.forward_mape <= 10.0          # the target (moonshot 5%)
    assert cal.forward_mape < cal.baseline_mape


@pytest.mark.shared_data
def test_packed_run_without_gen_time_says_so(shared_data, con):
    run = ingest_paths(con, [shared_data / DAPO]).run_id
    with pytest.raises(WorkloadError, match="has no generation time to fit"):
        calibrate(con, run)

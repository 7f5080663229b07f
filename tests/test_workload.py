"""The PolyTrace suite: synthesis, the demo run, the rollout cost model, dispatch policies and accuracy."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import H200_REPLAY_GRID, CostModel, from_grid
from polytrace.workload.demo import CAP, DP, STEPS, TP, write_demo_traces
from polytrace.workload.fit import fit_gmm, fit_lognormal
from polytrace.workload.published import PUBLISHED_MATH, PUBLISHED_TOOL_USE, read_params
from polytrace.workload.replay import (
    explain,
    finish_errors,
    read_engines,
    read_iterations,
    read_requests,
)
from polytrace.workload.simulate import Step, finish_times, load_steps, simulate
from polytrace.workload.synth import (
    sample_math,
    sample_tool_use,
    write_from_run,
    write_math_steps,
)
from polytrace.workload.timeline import StepWork, step_times, verl_lines, write_kineto
from polytrace.workload.traces import packed_lines, write_jsonl
from polytrace.workload.whatif import compare

PARAMS = Path("polytrace/dataset/workloads/enhanced_task_distribution_parameters.json")
DAPO = Path("polytrace/verl/profile/packed_length_log/20260614_023133")
VIDEO = Path("polytrace/verl-video/profile/packed_length_log/20260609_033329")
REPLAY = Path("gpu-replay-h200")


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- synthesis


def test_math_synthesis_is_byte_identical_under_a_seed(tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        write_math_steps(PUBLISHED_MATH, tmp_path / name, steps=3, prompts=16, n=8, cap=16384, seed=seed)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert tree_bytes(tmp_path / "a") != tree_bytes(tmp_path / "c")


def test_math_samples_follow_the_published_mixture():
    inputs, outputs = sample_math(PUBLISHED_MATH, np.random.default_rng(0), 20000, 1, cap=10 ** 6)
    # Mixture means: sum of weights * component means = (141.3, 9574.8), the file's mean_vector.
    expected = PUBLISHED_MATH.weights @ PUBLISHED_MATH.means
    assert inputs.mean() == pytest.approx(expected[0], rel=0.02)
    assert outputs.mean() == pytest.approx(expected[1], rel=0.02)
    _, capped = sample_math(PUBLISHED_MATH, np.random.default_rng(0), 500, 8, cap=8192)
    assert capped.min() >= 1 and capped.max() == 8192


def test_tool_use_call_counts_follow_the_published_frequencies():
    rollouts = sample_tool_use(PUBLISHED_TOOL_USE, np.random.default_rng(1), 20000)
    counts = np.array([len(outputs) for _, outputs in rollouts])
    total = sum(PUBLISHED_TOOL_USE.call_counts.values())
    # 3 calls: 104344 / 241546 = 0.432 of the published sessions.
    assert (counts == 3).mean() == pytest.approx(104344 / total, abs=0.01)
    assert all(len(i) == len(o) and i.min() >= 1 for i, o in rollouts[:200])


def test_lognormal_fit_recovers_its_parameters():
    x = np.random.default_rng(3).lognormal(mean=6.0, sigma=0.8, size=20000)
    mu, sigma = fit_lognormal(x)
    assert mu == pytest.approx(6.0, abs=0.02)
    assert sigma == pytest.approx(0.8, abs=0.02)
    # BIC keeps one component for a lognormal, and finds both modes of a two-mode mixture.
    assert fit_gmm(np.log(x), seed=0).n_components == 1
    two = np.concatenate([np.log(x), np.random.default_rng(4).normal(10.0, 0.3, 20000)])
    assert fit_gmm(two, seed=0).n_components == 2


def test_published_file_is_read_with_its_own_key_names(shared_data):
    math, tool_use = read_params(shared_data / PARAMS)
    np.testing.assert_allclose(math.means, PUBLISHED_MATH.means)
    np.testing.assert_allclose(math.covariances, PUBLISHED_MATH.covariances)
    assert math.output_lognorm == PUBLISHED_MATH.output_lognorm
    assert tool_use.call_counts == PUBLISHED_TOOL_USE.call_counts
    for k, (mean, cov) in tool_use.sequences.items():
        np.testing.assert_allclose(mean, PUBLISHED_TOOL_USE.sequences[k][0], atol=0.051)
        np.testing.assert_allclose(np.sqrt(np.diag(cov)),
                                   np.sqrt(np.diag(PUBLISHED_TOOL_USE.sequences[k][1])), atol=0.051)


def test_synth_cli_from_params_ingests_back(shared_data, tmp_path, con):
    args = ["synth", "--params", str(shared_data / PARAMS), "--steps", "2", "--prompts", "4",
            "--max-response-len", "4096", "--seed", "5"]
    assert main(args + ["--task", "math", "--out", str(tmp_path / "m")]) == 0
    assert main(args + ["--task", "tool_use", "--out", str(tmp_path / "t")]) == 0
    assert main(args + ["--task", "tool_use", "--out", str(tmp_path / "t2")]) == 0
    assert tree_bytes(tmp_path / "t") == tree_bytes(tmp_path / "t2")
    run = ingest_paths(con, [tmp_path / "m"]).run_id
    assert con.execute("SELECT count(*), max(response_len), count(DISTINCT step) FROM samples "
                       "WHERE run_id = ?", [run]).fetchone()[::2] == (64, 2)
    assert con.execute("SELECT max(response_len) FROM samples WHERE run_id = ?", [run]).fetchone()[0] <= 4096
    run = ingest_paths(con, [tmp_path / "t"]).run_id
    assert con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [run]).fetchone()[0] == 64


@pytest.mark.shared_data
@pytest.mark.parametrize("source", [DAPO, VIDEO], ids=["dapo", "video"])
def test_fit_from_run_matches_the_source(shared_data, tmp_path, con, source):
    run = ingest_paths(con, [shared_data / source]).run_id
    report = write_from_run(con, run, tmp_path / "a", seed=0)
    union = report[-1]
    assert union["step"] is None
    assert union["ks_response"] <= 0.05, report
    assert len(report) == len(list((shared_data / source).glob("packed_lengths_step_*.jsonl"))) + 1
    write_from_run(con, run, tmp_path / "b", seed=0)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    synthetic = ingest_paths(con, [tmp_path / "a"]).run_id
    counts = "SELECT step, count(*) FROM samples WHERE run_id = ? GROUP BY step ORDER BY step"
    assert con.execute(counts, [synthetic]).fetchall() == con.execute(counts, [run]).fetchall()


# ---------------------------------------------------------------- demo


def test_demo_run_is_realistic_and_ingests_as_one_run(tmp_path, con):
    write_demo_traces(tmp_path / "a", seed=0)
    write_demo_traces(tmp_path / "b", seed=0)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    run = ingest_paths(con, [tmp_path / "a"]).run_id
    steps, ranks, dp_ranks, at_cap, over_cap = con.execute(
        "SELECT count(DISTINCT step), list(DISTINCT rank ORDER BY rank), count(DISTINCT dp_rank),"
        " count(*) FILTER (response_len = ?), count(*) FILTER (response_len > ?) FROM samples"
        " WHERE run_id = ?", [CAP, CAP, run]).fetchone()
    assert (steps, ranks, dp_ranks) == (STEPS, [d * TP for d in range(DP)], DP)
    assert at_cap > 0 and over_cap == 0
    first, last = con.execute(
        "SELECT median(response_len) FILTER (step < 5), median(response_len) FILTER (step >= ?)"
        " FROM samples WHERE run_id = ?", [STEPS - 5, run]).fetchone()
    assert last > 1.3 * first  # responses grow over the run
    tail = con.execute("SELECT median(m / p) FROM (SELECT max(response_len) AS m,"
                       " median(response_len) AS p FROM samples WHERE run_id = ? GROUP BY step)",
                       [run]).fetchone()[0]
    assert tail > 6  # a long tail: the longest response is many medians long
    corr, n = con.execute("SELECT corr(seconds, tokens), count(*) FROM rank_stage WHERE run_id = ?",
                          [run]).fetchone()
    assert n == STEPS * DP and corr > 0.6
    kept, used = con.execute("SELECT count(*) FILTER (kept), count(*) FILTER (used) FROM samples "
                             "WHERE run_id = ?", [run]).fetchone()
    assert 0 < used < kept < STEPS * 96 * 8


def test_step_times_and_their_gpu_trace_by_hand(tmp_path, con):
    # A constant 1 ms per decode iteration, no prefill: engine 0 decodes [100, 100] in 0.1 s,
    # engine 1 [400] in 0.4 s. 600 response tokens and no prompt: log-prob and ref take
    # 4e-6 * 600 / 2 engines = 1.2 ms each; training on all of them 1.2e-5 * 200 = 2.4 ms on
    # engine 0 and 4.8 ms on engine 1. The step: weight sync 0.12 + rollout 0.4 + reward 2.0
    # + 2 * 0.0012 + 0.0048 + all-reduce 0.25 + other 0.4 = 3.1772 s.
    work = [StepWork(0, np.zeros(3, np.int64), np.array([100, 100, 400]), np.array([0, 0, 1]),
                     np.ones(3, bool), np.array([1.0, 2.0]))]
    (t,) = step_times(work, engines=2, model=CostModel(a=0.001, b=0.0, c=0.0))
    assert t.gen_s.tolist() == pytest.approx([0.1, 0.4])
    assert (t.reward_s, t.old_log_prob_s, t.ref_s) == pytest.approx((2.0, 0.0012, 0.0012))
    assert t.update_actor_s.tolist() == pytest.approx([0.0024, 0.0048])
    assert t.step_s == pytest.approx(3.1772)
    (line,) = verl_lines(work, [t], gpus=2)
    assert line["data"]["timing_s/gen"] == 0.4 and line["data"]["perf/total_num_tokens"] == 600
    # Both engines' GPUs run the same kernels but decode: engine 0's waits 0.3 s longer idle.
    write_kineto(tmp_path / "trace", [t], engines=2, tp=1)
    run = ingest_paths(con, [tmp_path / "trace"]).run_id
    idle = dict(con.execute("SELECT rank, kernel_time_us - busy_us FROM gpu_step_time WHERE run_id = ? AND step IS NULL"
                            " AND NOT include_last_step", [run]).fetchall())
    assert idle[0] - idle[1] == pytest.approx(300_000, abs=1)


def test_demo_stages_and_gpu_traces_follow_its_lengths(tmp_path, con):
    write_demo_traces(tmp_path, seed=0)
    run = ingest_paths(con, [tmp_path]).run_id
    assert con.execute("SELECT count(*) FROM gpu_ranks WHERE run_id = ?", [run]).fetchone() == (DP * TP,)
    # verl's gen stage is the slowest engine's rollout, as simulating the lengths predicts it
    gen = dict(con.execute("SELECT step, value FROM step_metrics WHERE run_id = ? AND key = 'timing_s/gen'",
                           [run]).fetchall())
    rows = simulate(load_steps(con, run), H200_REPLAY_GRID, ["as-recorded"])
    assert gen == pytest.approx({r["step"]: r["predicted_s"] for r in rows if r["engine"] is None}, abs=1e-6)
    # per profiled step, the GPUs of the engine that finished its rollout last idle least
    least_idle = con.execute(
        "SELECT step, arg_min(rank, kernel_time_us - busy_us) FROM gpu_step_time WHERE run_id = ?"
        " AND step IS NOT NULL AND include_last_step GROUP BY step ORDER BY step", [run]).fetchall()
    slowest = {}
    for r in rows:
        if r["engine"] is not None and r["predicted_s"] > slowest.get(r["step"], (None, -1))[1]:
            slowest[r["step"]] = (r["engine"], r["predicted_s"])
    assert [rank // TP for _, rank in least_idle] == [slowest[step][0] for step, _ in least_idle]
    assert len(least_idle) == STEPS


# ---------------------------------------------------------------- cost model and simulation


def step_of(engine_lengths: list[list[list[int]]], step: int = 0, prompt_len: int = 0) -> Step:
    """engine -> prompt groups -> response lengths, as a Step with prompts numbered in order."""
    pid, dp, lens = [], [], []
    for e, groups in enumerate(engine_lengths):
        for group in groups:
            p = len(set(pid))
            for length in group:
                pid.append(p)
                dp.append(e)
                lens.append(length)
    a = np.array
    return Step(step, a(pid), a(dp), np.full(len(lens), prompt_len), a(lens))


def by_key(rows):
    return {(r["step"], r["policy"], r["engine"]): r for r in rows}


def test_two_engines_with_constant_iteration_cost():
    # Engine 0 decodes [10, 10]: 10 iterations; engine 1 decodes [40]: 40 iterations.
    # At 1 s per iteration: 10 s and 40 s. Engine 0 idles 1 - 10/40 = 0.75 of the rollout,
    # and the step's rollout idle is 1 - (10 + 40) / (2 * 40) = 0.375. Moving samples
    # cannot beat the 40-token sample, so the oracle's speedup is 1.
    rows = by_key(simulate([step_of([[[10, 10]], [[40]]])], CostModel(a=1.0, b=0.0, c=0.0),
                           ["as-recorded", "length-balanced", "round-robin"]))
    assert rows[(0, "as-recorded", 0)]["predicted_s"] == pytest.approx(10.0)
    assert rows[(0, "as-recorded", 1)]["predicted_s"] == pytest.approx(40.0)
    assert rows[(0, "as-recorded", 0)]["idle_frac"] == pytest.approx(0.75)
    assert rows[(0, "as-recorded", None)]["predicted_s"] == pytest.approx(40.0)
    assert rows[(0, "as-recorded", None)]["rollout_idle_frac"] == pytest.approx(0.375)
    assert rows[(0, "length-balanced", None)]["speedup"] == pytest.approx(1.0)
    assert rows[(0, "length-balanced", None)]["oracle"] is True
    assert rows[(0, "round-robin", None)]["oracle"] is False


def test_batch_cost_partial_rollout_and_balancing_by_hand():
    # t = 1 + 1 * live per iteration. Step 0: engine 0 [10, 10] -> 10 * (1 + 2) = 30 s;
    # engine 1 [40] -> 40 * (1 + 1) = 80 s. Step 1: [10, 10] -> 30 s; [10] -> 20 s.
    # as-recorded total: 80 + 30 = 110 s.
    # partial-rollout:0.5 caps step 0 at the median, 10: engine 1 makes 10 tokens, 20 s, so
    # step 0 takes 30 s; its sample carries 30 tokens to step 1 (the last step drains):
    # engine 1 then has [10, 30]: 10 * 3 + 20 * 2 = 70 s. Total 30 + 70 = 100 s.
    # length-balanced step 0: {40} | {10, 10} is best (80 s); {40, 10} | {10} would be 90 s.
    steps = [step_of([[[10, 10]], [[40]]], 0), step_of([[[10, 10]], [[10]]], 1)]
    rows = by_key(simulate(steps, CostModel(a=1.0, b=1.0, c=0.0),
                           ["as-recorded", "partial-rollout:0.5", "length-balanced"]))
    assert [rows[(s, "as-recorded", None)]["predicted_s"] for s in (0, 1)] == pytest.approx([80, 30])
    assert [rows[(s, "partial-rollout:0.5", e)]["predicted_s"] for s in (0, 1) for e in (0, 1)] == \
        pytest.approx([30, 20, 30, 70])
    assert rows[(0, "partial-rollout:0.5", None)]["speedup"] == pytest.approx(80 / 30)
    assert rows[(0, "partial-rollout:0.5", 1)]["tokens"] == 10
    assert rows[(0, "length-balanced", None)]["predicted_s"] == pytest.approx(80)


def test_context_and_prefill_costs_by_hand():
    # One sample, prompt 5, 3 tokens, c = 1 s per context token: iterations see contexts
    # 6, 7, 8 -> 21 s; prefill p0 + p1 * 5 = 1 + 2 * 5 = 11 s. Finish at 32 s.
    model = CostModel(a=0.0, b=0.0, c=1.0, p0=1.0, p1=2.0)
    assert finish_times(model, np.array([5]), np.array([3])) == pytest.approx([32.0])
    # Two samples [1, 2], prompts 0: iteration 1 has 2 live (contexts 1 + 1), iteration 2 one (2).
    assert finish_times(CostModel(a=0, b=0, c=1.0), np.array([0, 0]), np.array([1, 2])) == \
        pytest.approx([2.0, 4.0])


def test_grid_calibration_recovers_a_linear_cost():
    # seconds = 0.001 + 0.001 * batch exactly: NNLS finds a = b = 0.001, c = 0.
    grid = {"decode": [{"batch": b, "context": c, "seconds": 0.001 + 0.001 * b}
                       for b in (1, 2, 4, 8) for c in (256, 1024)],
            "prefill": [{"batch": 4, "prompt": 100, "seconds": 0.5}, {"batch": 8, "prompt": 100, "seconds": 0.9}]}
    m = from_grid(grid)
    assert (m.a, m.b, m.c) == pytest.approx((0.001, 0.001, 0.0), abs=1e-9)
    # prefill: 0.5 = p0 + 400 p1, 0.9 = p0 + 800 p1 -> p1 = 0.001, p0 = 0.1.
    assert (m.p0, m.p1) == pytest.approx((0.1, 0.001), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    engines=st.integers(2, 4),
    samples=st.lists(st.tuples(st.integers(1, 300), st.integers(0, 3), st.integers(1, 200)),
                     min_size=1, max_size=40),
    cost=st.tuples(st.floats(0, 1e-2), st.floats(0, 1e-3), st.floats(0, 1e-6), st.floats(0, 0.1),
                   st.floats(0, 1e-5)),
)
def test_length_balanced_is_never_slower_than_as_recorded(engines, samples, cost):
    lengths = np.array([s[0] for s in samples])
    dp = np.array([s[1] % engines for s in samples])
    prompts = np.array([s[2] for s in samples])
    step = Step(0, np.arange(len(samples)), dp, prompts, lengths)
    rows = by_key(simulate([step], CostModel(*cost), ["as-recorded", "length-balanced"], engines))
    balanced = rows[(0, "length-balanced", None)]["predicted_s"]
    recorded = rows[(0, "as-recorded", None)]["predicted_s"]
    assert balanced <= recorded * (1 + 1e-9) + 1e-12


# ---------------------------------------------------------------- what-if table and query


def test_simulate_store_and_whatif_query(tmp_path, db_path, con, capsys):
    # Engine 0 has prompts 0 and 1 ([10, 10] each), engine 1 prompt 2 ([10, 10]). With
    # t = 0.001 + 0.001 * live: as-recorded engine 0 is 10 * 0.005 = 0.05 s, engine 1
    # 10 * 0.003 = 0.03 s. length-balanced puts 3 samples on each: 10 * 0.004 = 0.04 s.
    # Saved 0.01 s per step; at 8 GPUs 0.01 * 8 / 3600 GPU-hours.
    trace = tmp_path / "run"
    write_jsonl(trace / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5, 5, 5]), np.full((3, 2), 10), np.array([0, 0, 1]), tp=1))
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps({"decode": [{"batch": b, "context": c, "seconds": 0.001 + 0.001 * b}
                                            for b in (1, 2, 4) for c in (256, 1024)]}))
    run = ingest_paths(con, [trace]).run_id
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", str(calib), "--policy",
                 "length-balanced", "--policy", "round-robin", "--store", "--output", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in printed} == {"as-recorded", "length-balanced", "round-robin"}
    from polytrace.queries.catalog import bind, get_query
    from polytrace.queries.runner import run_bound

    c = store.open(db_path)
    try:
        q = get_query("whatif")
        assert q.section == "What if"
        result = run_bound(c, q, bind(q, {"run_id": run, "gpus": "8"}))
    finally:
        c.close()
    rows = {r[result.columns.index("policy")]: dict(zip(result.columns, r)) for r in result.rows}
    assert rows["as-recorded"]["predicted_s"] == pytest.approx(0.05)
    assert rows["length-balanced"]["predicted_s"] == pytest.approx(0.04)
    assert rows["length-balanced"]["gpu_hours_saved"] == pytest.approx(0.01 * 8 / 3600)
    assert rows["round-robin"]["saved_s"] == pytest.approx(0.0)  # prompts 0 and 2 share engine 0
    # Without the gpus parameter: ranks 0 and 1 (tp = 1) -> max rank 1 + stride 1 = 2 GPUs.
    c = store.open(db_path)
    try:
        result = run_bound(c, q, bind(q, {"run_id": run}))
    finally:
        c.close()
    assert {r[result.columns.index("gpus")] for r in result.rows} == {2}


def test_simulate_engines_as_a_multiple_of_the_recorded(tmp_path, db_path, con, capsys):
    # Two recorded engines (dp ranks 0 and 1): x2 is the same simulation as 4 engines.
    trace = tmp_path / "run"
    write_jsonl(trace / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5, 5, 5, 5]), np.array([[10, 40], [20, 30], [5, 5], [60, 1]]),
                             np.array([0, 0, 1, 1]), tp=1))
    run = ingest_paths(con, [trace]).run_id
    con.close()
    printed = {}
    (tmp_path / "calib.json").write_text(json.dumps({"decode": [
        {"batch": b, "context": c, "seconds": 0.001 + 0.001 * b} for b in (1, 2, 4) for c in (256, 1024)]}))
    for engines in ("x2", "4"):
        assert main(["simulate", run, "--db", str(db_path), "--calibration", str(tmp_path / "calib.json"),
                     "--policy", "round-robin", "--engines", engines, "--output", "json"]) == 0
        printed[engines] = json.loads(capsys.readouterr().out)
    assert printed["x2"] == printed["4"]
    assert {r["engine"] for r in printed["x2"] if r["policy"] == "round-robin"} == {0, 1, 2, 3, None}
    # 0 engines ran as the default; more engines than the step's 8 samples only sit idle (10**8
    # of them ran out of time)
    simulate = ["simulate", run, "--db", str(db_path), "--calibration", str(tmp_path / "calib.json"), "--engines"]
    assert main([*simulate, "0"]) == 2
    assert capsys.readouterr().err == "error: --engines must be at least 1, got 0\n"
    assert main([*simulate, "100000000"]) == 2
    assert capsys.readouterr().err == ("error: --engines 100,000,000 engines, more than the 8 samples of the run's "
                                       "largest step: an engine without a sample only sits idle\n")
    assert main([*simulate, "x5"]) == 2
    assert "--engines x5 means 10 engines, more than the 8 samples" in capsys.readouterr().err
    assert main([*simulate, "8", "--output", "json"]) == 0
    capsys.readouterr()


def test_simulate_cli_errors_are_one_line(db_path, capsys):
    assert main(["simulate", "nope", "--db", str(db_path), "--calibration", str(db_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: calibration file") and err.count("\n") == 1
    assert main(["simulate", "nope", "--db", str(db_path), "--calibration", str(db_path),
                 "--iterations", str(db_path)]) == 2
    assert capsys.readouterr().err == "error: --iterations and --requests need --compare ENGINES_JSONL\n"


# ---------------------------------------------------------------- accuracy against the H200 replay


def test_replay_time_splits_by_hand(tmp_path):
    # A constant 1 ms model. Engine 0: total 1.0 s, prefill 0.1 s, four iterations of
    # 1, 1, 4 and 1 ms: decode 0.007 s, outside 1.0 - 0.1 - 0.007 = 0.893 s. The 4 ms one
    # is over 1.5x the model (excess 3 ms): undisturbed 1.0 - 0.003 - 0.893 = 0.104 s.
    engines = tmp_path / "engines.jsonl"
    engines.write_text('{"step": 0, "dp_rank": 0, "total_s": 1.0, "prefill_s": 0.1}\n')
    iters = tmp_path / "iters.jsonl.gz"
    with gzip.open(iters, "wt") as f:
        for seconds in (0.001, 0.001, 0.004, 0.001):
            f.write(json.dumps({"step": 0, "dp_rank": 0, "live": 2, "context": 5, "seconds": seconds}) + "\n")
    parts = explain(read_engines(engines), read_iterations(iters), CostModel(a=0.001, b=0.0, c=0.0))
    assert parts[(0, 0)] == pytest.approx({
        "prefill_s": 0.1, "decode_s": 0.007, "outside_s": 0.893, "iterations": 4, "model_decode_s": 0.004,
        "slow_share": 0.25, "slow_excess_s": 0.003, "undisturbed_s": 0.104})
    # Samples of 10 and 20 tokens finish at 10 and 20 ms under the model; measured 11 and
    # 20 ms: errors 1/11 = 9.0909% and 0%, median 4.5455%, 90th percentile 0.9 * 9.0909%.
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"dp_rank": 0, "prompt_len": 0, "output_len": n, "finish_s": f}) + "\n"
                                for n, f in ((10, 0.011), (20, 0.020))))
    assert finish_errors(read_requests(requests), CostModel(a=0.001, b=0.0, c=0.0)) == {
        (0, 0): pytest.approx({"finish_error_p50_pct": 4.545454, "finish_error_p90_pct": 8.181818})}
    engines.write_text('{"step": 0, "dp_rank": 1, "total_s": 1.0}\n')
    with pytest.raises(WorkloadError, match="no logged iterations for step 0 engine 1"):
        explain(read_engines(engines), read_iterations(iters), CostModel(a=0.001, b=0.0, c=0.0))


@pytest.mark.shared_data
def test_as_recorded_prediction_against_the_h200_replay(shared_data, con):
    run = ingest_paths(con, [shared_data / DAPO]).run_id
    steps = load_steps(con, run)
    engines = read_engines(shared_data / REPLAY / "engines.jsonl")
    measured = {key: e["total_s"] for key, e in engines.items()}
    from polytrace.workload.costmodel import load

    # The grid calibration was measured apart from any workload, so step 0 is out of sample.
    grid = load(shared_data / REPLAY / "calib.json")
    rows = simulate(steps, grid, ["as-recorded"])
    table, _ = compare(rows, measured)
    assert abs(table[0]["error_pct"]) <= 15  # engine 0 ran undisturbed
    assert table[1]["error_pct"] < -30       # engine 1 was profiled: see below
    # Engine 1's measured time holds 5.9 s outside any decode iteration and a run of
    # iterations at ~1.8x its own first 50 (which ran at engine 0's speed): the profiler
    # captures at iterations 50 and 3000. Engine 0 has neither.
    parts = explain(engines, read_iterations(shared_data / REPLAY / "iters.jsonl.gz"), grid)
    assert parts[(0, 1)]["outside_s"] > 5 and parts[(0, 0)]["outside_s"] < 0.5
    assert parts[(0, 1)]["slow_share"] > 0.4 and parts[(0, 0)]["slow_share"] < 0.1
    # The shrinking batch, sample by sample: engine 0's finish times are where the grid puts them.
    finish = finish_errors(read_requests(shared_data / REPLAY / "requests.jsonl.gz"), grid)
    assert finish[(0, 0)]["finish_error_p50_pct"] < 10
    calm, accuracy = compare(rows, {key: p["undisturbed_s"] for key, p in parts.items()})
    for row in calm:
        if row["engine"] is not None:
            assert abs(row["error_pct"]) <= 15, row
        else:
            assert abs(row["idle_error_pp"]) <= 5, row
    assert accuracy >= 85
    # Fitted on step 0's own iterations with one speed factor per engine (in sample):
    # within 15% of every measured total.
    fitted, _ = compare(simulate(steps, load(shared_data / REPLAY / "iters.jsonl.gz"), ["as-recorded"]),
                        measured)
    assert all(abs(r["error_pct"]) <= 15 for r in fitted), fitted


# ---------------------------------------------------------------- run facts the input lacks


def test_ingest_cli_sets_the_cap_and_gpus_when_the_input_lacks_them(tmp_path, db_path, capsys):
    # One prompt, lengths [3, 8] with a cap of 8: one of two responses at the cap.
    trace = tmp_path / "run"
    write_jsonl(trace / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5]), np.array([[3, 8]]), np.array([0]), tp=1))
    assert main(["ingest", str(trace), "--db", str(db_path), "--max-response-len", "0"]) == 2
    assert capsys.readouterr().err == "error: --max-response-len must be an integer from 1 to 2147483647, got 0\n"
    assert main(["ingest", str(trace), "--db", str(db_path), "--max-response-len", "99999999999"]) == 2
    assert capsys.readouterr().err == ("error: --max-response-len must be an integer from 1 to 2147483647, "
                                       "got 99999999999\n")
    assert main(["ingest", str(trace), "--db", str(db_path), "--max-response-len", "8",
                 "--gpus", "4"]) == 0
    out = capsys.readouterr()
    run_id = out.out.strip()
    assert "warning" not in out.err  # the longest response, 8, is at the cap, not past it
    # a cap the lengths outgrow is likely not the run's: said, and kept as given
    other = tmp_path / "db2.duckdb"
    assert main(["ingest", str(trace), "--db", str(other), "--max-response-len", "5"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "warning: 1 of 2 responses are longer than the response cap given, 5 tokens (the longest 8): "
        "is it the run's cap? The cap findings count them as cut at it")
    # the same files again with other facts: the stored run stays as loaded, and that is said
    assert main(["ingest", str(trace), "--db", str(db_path), "--gpus", "2"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: these inputs are run {run_id} already: n_gpus not applied (ingest again with force, --force, "
        "to load them with it)", "already ingested polytrace-packed: samples=2"]
    
    con = store.open(db_path)
    try:
        assert con.execute("SELECT max_response_len, n_gpus FROM runs WHERE run_id = ?",
                           [run_id]).fetchone() == (8, 4)
        assert con.execute("SELECT capped, cap_known FROM step_lengths WHERE run_id = ?",
                           [run_id]).fetchone() == (1, 2)
    finally:
        con.close()


def test_run_overrides_never_replace_what_the_input_says(tmp_path, con):
    from polytrace.ingest.contract import IngestError

    trace = tmp_path / "run"
    write_jsonl(trace / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5]), np.array([[3, 8]]), np.array([0]), tp=1))
    with pytest.raises(IngestError, match="cannot set run field"):
        ingest_paths(con, [trace], run_overrides={"name": "x"})
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    # The layout verl/profile/packed_length_log/... says the framework: the input wins.
    said = tmp_path / "verl" / "profile" / "packed_length_log" / "run"
    write_jsonl(said / "packed_lengths_step_0.jsonl",
                packed_lines(0, np.array([5]), np.array([[3, 8]]), np.array([0]), tp=1))
    run_id = ingest_paths(con, [said], run_overrides={"framework": "openrlhf", "max_response_len": 16,
                                                      "n_gpus": None}).run_id
    assert con.execute("SELECT framework, max_response_len, n_gpus FROM runs WHERE run_id = ?",
                       [run_id]).fetchone() == ("verl", 16, None)


@pytest.mark.shared_data
def test_rllm_cap_from_the_command_line(shared_data, con):
    # rllm's reward_timings say response_max 16000: the cap, which its packed logs do not carry.
    rllm = shared_data / "polytrace/rllm/profile/packed_length_log/20260616_024512"
    first = json.loads((rllm / "reward_timings_step_0.jsonl").read_text().splitlines()[0])
    assert first["response_max"] == 16000
    plain = ingest_paths(con, [rllm]).run_id
    capped = ingest_paths(con, [rllm], force=True, run_overrides={"max_response_len": 16000}).run_id
    from polytrace.queries.catalog import bind, get_query
    from polytrace.queries.runner import run_bound

    q = get_query("run_summary")
    summary = {r: dict(zip(*(lambda res: (res.columns, res.rows[0]))(run_bound(con, q, bind(q, {"run_id": r})))))
               for r in (plain, capped)}
    assert summary[plain]["cap_ratio"] is None
    at_cap, n = con.execute("SELECT count(*) FILTER (response_len >= 16000), count(*) FROM samples "
                            "WHERE run_id = ?", [capped]).fetchone()
    assert at_cap > 0
    assert summary[capped]["cap_ratio"] == pytest.approx(at_cap / n, rel=1e-12)
    assert summary[capped]["max_response_len"] == 16000


def test_demo_run_carries_the_cap_and_gpus(tmp_path):
    import duckdb

    from polytrace.demo import build

    db = tmp_path / "demo.duckdb"
    math_run, _agent = build(db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT max_response_len, n_gpus FROM runs WHERE run_id = ?",
                           [math_run]).fetchone() == (CAP, DP * TP)
        from polytrace.queries.catalog import bind, get_query
        from polytrace.queries.runner import run_bound

        q = get_query("run_summary")
        res = run_bound(con, q, bind(q, {"run_id": math_run}))
        row = dict(zip(res.columns, res.rows[0]))
        assert 0 < row["cap_ratio"] < 0.1 and row["max_response_len"] == CAP
        savings = get_query("whatif_savings")
        res = run_bound(con, savings, bind(savings, {"run_id": math_run}))
        assert {r[res.columns.index("gpus")] for r in res.rows} == {DP * TP}
    finally:
        con.close()

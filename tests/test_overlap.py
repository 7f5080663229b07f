"""The async what-if (workload/overlap.py): by hand, from a verl log made by the formula through
the CLI, and on the shared real logs, where it must say a gain on one and a loss on the other."""
from __future__ import annotations

import math

import numpy as np
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from polytrace.queries import findings
from polytrace.workload import overlap
from tests.test_calibration import HAND, TRUTH, VERL_LOGS, by_formula, verl_log


def test_async_step_by_hand():
    # The case of tests/fixtures/golden/README.md "whatif_async": latency 11, throughput 4,
    # training 9, sync 1 on 4 GPUs.
    rest = {"steps": np.array([1]), "step_s": np.array([25.5]), "train": np.array([9.0]),
            "sync": np.array([1.0]), "checkpoint": np.array([0.0]), "validation": np.array([0.0])}
    rows = {r["mode"]: r for r in overlap.predict(np.array([11.0]), np.array([4.0]), rest, gpus=4)}
    one, two = rows["one-step-off"], rows["fully-async:2"]
    assert (one["rollout_gpus"], one["predicted_s"], one["limited_by"]) == (2, 20.0, "slowest sample")
    assert one["predicted_sync_s"] == 25.0 and one["speedup"] == 1.25 and one["gen_s"] == 15.0
    assert (two["rollout_gpus"], two["predicted_s"], two["limited_by"]) == (1, 17.0, "rollout throughput")
    assert rows["fully-async:4"]["predicted_s"] == 17.0


def test_without_a_gpu_count_the_split_is_a_share():
    assert overlap.shares(None)[0] == pytest.approx(1 / 16) and len(overlap.shares(1)) == 15
    assert [float(f) for f in overlap.shares(4)] == [0.25, 0.5, 0.75]


def _split(L, m, pm, n, synced, tool, coef=TRUTH):
    """by_formula's gen split into what more engines do not shorten and what they do."""
    t0, t_sync, a, b, c, p = coef
    latency = t0 + t_sync * synced + tool + a * L
    return latency, by_formula(L, m, pm, n, synced, tool, coef) - latency


def test_a_log_made_by_the_formula_through_the_cli(tmp_path, db_path, con, capsys):
    # Each step's training is 1.5x its gen; step 6 also saved a 20 s checkpoint. The log was made
    # by the formula (no validation: every step syncs), so the fit recovers it and every figure
    # can be derived here.
    steps = [(*r[:4], 1, r[5]) for r in HAND]
    log = verl_log(tmp_path / "output.log", steps)
    text = log.read_text().splitlines()
    for i, row in enumerate(steps, start=1):
        gen = by_formula(*row)
        extra = " - timing_s/save_checkpoint:20.0" if i == 6 else ""
        text[i] += f" - timing_s/step:{2.5 * gen + (20.0 if i == 6 else 0.0)}{extra}"
    log.write_text("\n".join(text) + "\n")
    run = ingest_paths(con, [log], run_overrides={"n_gpus": 8}).run_id
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--store"]) == 0
    err = capsys.readouterr().err
    c = store.open(db_path, "r")
    try:
        rows = c.execute("SELECT step, mode, rollout_gpus, predicted_sync_s, predicted_s, train_s FROM "
                         "whatif_async WHERE run_id = ? ORDER BY mode, step", [run]).fetchall()
        found = [f for f in findings.findings(c, run) if f["kind"] == "whatif_async"]
    finally:
        c.close()
    assert "async what-if" in err
    one = [r for r in rows if r[1] == "one-step-off"]
    assert len(one) == 12 and {r[2] for r in one} == {one[0][2]}
    k = one[0][2]

    def expected(share):
        out = []
        for i, row in enumerate(steps):
            latency, throughput = _split(*row)
            train = 1.5 * by_formula(*row)
            out.append(max(throughput / share, train / (1 - share), latency + throughput / share)
                       + (20.0 if i == 5 else 0.0))
        return out

    assert [r[4] for r in one] == pytest.approx(expected(k / 8), rel=1e-6)
    assert all(sum(expected(k / 8)) <= sum(expected(j / 8)) + 1e-9 for j in range(1, 8))
    assert [r[3] for r in one] == pytest.approx([2.5 * by_formula(*r) + (20.0 if i == 5 else 0.0)
                                                for i, r in enumerate(steps)], rel=1e-6)
    saved = 1 - sum(r[4] for r in one) / sum(r[3] for r in one)
    assert len(found) == 1 and found[0]["value"] == pytest.approx(saved)
    shown = f"{100 * abs(saved):.1f}%"
    assert shown in found[0]["text"] and ("less time" if saved > 0 else "longer") in found[0]["text"]


def test_an_async_run_gets_no_async_what_if(con):
    con.execute("INSERT INTO runs (run_id, name, format, trainer_gpus) VALUES ('a', 'a', 'verl-console', 4)")
    assert overlap.is_async(con, "a")
    con.execute("INSERT INTO runs (run_id, name, format) VALUES ('s', 's', 'verl-console')")
    assert not overlap.is_async(con, "s")


@pytest.mark.shared_data
@pytest.mark.parametrize("log, gains", [("qwen3-4b-agent-run-ry3hgbx5", True),
                                        ("qwen3-4b-agent-run-i80f2v90", False)])
def test_real_logs(shared_data, db_path, con, capsys, log, gains):
    # ry3hgbx5 spends more of its step generating than i80f2v90 (whose step is ~80% training):
    # overlap pays on the first and costs the second its trainer GPUs.
    run = ingest_paths(con, [shared_data / VERL_LOGS / f"{log}.output.log"], run_overrides={"n_gpus": 8}).run_id
    con.close()
    assert main(["simulate", run, "--db", str(db_path), "--calibration", "log", "--store"]) == 0
    capsys.readouterr()
    c = store.open(db_path, "r")
    try:
        sync, pred, measured, n = c.execute(
            "SELECT sum(predicted_sync_s), sum(predicted_s), sum(measured_s), count(*) FROM whatif_async "
            "WHERE run_id = ? AND mode = 'one-step-off'", [run]).fetchall()[0]
        found = [f for f in findings.findings(c, run) if f["kind"] == "whatif_async"]
    finally:
        c.close()
    assert n >= 80
    # the model's synchronous steps stay within a few percent of the measured ones
    assert math.isclose(sync, measured, rel_tol=0.02)
    assert len(found) == 1 and found[0]["value"] == pytest.approx(1 - pred / sync)
    if gains:
        assert found[0]["value"] >= 0.05 and "less time" in found[0]["text"] and "2.77x" in found[0]["text"]
    else:
        assert found[0]["value"] < 0 and "stay colocated" in found[0]["text"]

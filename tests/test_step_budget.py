"""step_budget: every step's GPU-seconds add up to step time x GPUs, on the hand-made cases and on
the real traces; and POST /whatif simulates on the run's own log when the run timed its rollout."""
from __future__ import annotations

import math
import re

import httpx
import pytest

from polytrace import store
from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.workload.costmodel import H200_REPLAY_GRID
from polytrace.workload.whatif import simulate_and_store
from tests.goldens import case_names, load_case

BUCKETS = ("gen_busy", "gen_tail_idle", "gen_imbalance_idle", "gen_long_tail", "gen_overhead", "reward",
           "logprob", "update", "weight_sync", "checkpoint", "validation", "other")
GEN = ("gen_busy", "gen_tail_idle", "gen_imbalance_idle", "gen_long_tail", "gen_overhead")
REAL = {
    "verl_i80": "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log",
    "verl_ry3": "verl-logs/qwen3-4b-agent-run-ry3hgbx5.output.log",
    "dapo": "polytrace/verl/profile/packed_length_log/20260614_023133",
    "rllm": "polytrace/rllm/profile/packed_length_log/20260616_024512",
}
GRID = f"simulated: {H200_REPLAY_GRID.source}"


def rows(con, name: str, run_id: str, **params) -> list[dict]:
    query = load_catalog()[name]
    result = run_bound(con, query, bind(query, {"run_id": run_id, **params}))
    return [dict(zip(result.columns, r)) for r in result.rows]


def budget(con, run_id: str) -> list[dict]:
    """step_budget with its whole-run row."""
    return rows(con, "step_budget", run_id, include_total="true")


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def assert_adds_up(found: list[dict]) -> None:
    """Each row's columns sum to step_s x gpus (NULL counts 0); a step without a time has no
    figures; the whole-run row (last, step NULL) is the column sums of the steps."""
    *steps, whole = found
    assert whole["step"] is None and all(r["step"] is not None for r in steps)
    for r in found:
        if r["step_s"] is None:
            assert r["gpu_s"] is None and all(r[b] is None for b in BUCKETS), r
            continue
        assert close(r["gpu_s"], r["step_s"] * r["gpus"]), r
        assert close(sum(r[b] or 0.0 for b in BUCKETS), r["gpu_s"]), r
    for column in ("step_s", "gpu_s", *BUCKETS):
        values = [r[column] for r in steps if r[column] is not None]
        assert (whole[column] is None) if not values else close(whole[column], sum(values)), column


@pytest.mark.parametrize("case", case_names())
def test_columns_add_up_to_step_time_times_gpus_on_every_golden_case(case):
    con = load_case(case)
    try:
        for run_id in ("r1", "r2"):
            found = budget(con, run_id)
            if found:
                assert_adds_up(found)
                assert rows(con, "step_budget", run_id) == found[:-1]  # the chart's rows: steps only
    finally:
        con.close()


# The whole-run rows tests/fixtures/golden/README.md derives: basis, step_from, gen_from, gpus,
# gpus_from, then step_s, gpu_s and the BUCKETS (None: NULL in every step).
WHOLE_RUN = {
    "budget_packed": ("mixed", "mixed", "mixed", 4, "runs.n_gpus", 84, 336,
                      93 + 1 / 3, None, 30 + 2 / 3, 12, 8, 18, 36, 80, None, 12, None, 46),
    "budget_verl": ("mixed", "mixed", "timing_s/gen", 1, "unknown: per GPU", 125, 125,
                    21.5, 26.5, None, None, 8, 1, 9, 18, 2.5, 5, 15, 18.5),
    "budget_both": ("mixed", "timing_s/step", "timing_s/gen", 8, "run_ranks.gpus_from_ranks", 30, 240,
                    58, 24, 30, 0, 32, None, 16, 40, None, None, None, 40),
}
WHOLE_COLUMNS = ("basis", "step_from", "gen_from", "gpus", "gpus_from", "step_s", "gpu_s", "gen_busy",
                 "gen_long_tail", "gen_tail_idle", "gen_imbalance_idle", "gen_overhead", "reward", "logprob",
                 "update", "weight_sync", "checkpoint", "validation", "other")


@pytest.mark.parametrize("case", sorted(WHOLE_RUN))
def test_whole_run_row_matches_the_hand_derivation(case):
    con = load_case(case)
    try:
        whole = budget(con, "r1")[-1]
    finally:
        con.close()
    assert whole["step"] is None
    for column, want in zip(WHOLE_COLUMNS, WHOLE_RUN[case]):
        got = whole[column]
        assert got == want if want is None or isinstance(want, str) else close(got, want), (column, got)


def test_idle_columns_follow_the_basis():
    """Engine idle only where engines were seen; the long tail only where they were not."""
    for case in ("budget_packed", "budget_verl", "budget_both"):
        con = load_case(case)
        try:
            for r in rows(con, "step_budget", "r1"):
                engines = r["basis"] in ("packed lengths", "engine seconds")
                assert (r["gen_tail_idle"] is not None) == (engines and r["gen_from"] is not None), r
                assert r["gen_long_tail"] is None or r["basis"] == "verl log", r
        finally:
            con.close()


# ---- the real traces --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from tests.conftest import SHARED_DATA, skip_for_data

    if not SHARED_DATA.is_dir():
        skip_for_data()
    con = store.open(tmp_path_factory.mktemp("budget") / "real.duckdb")
    ids = {key: ingest_paths(con, [SHARED_DATA / rel]).run_id for key, rel in REAL.items()}
    yield con, ids
    con.close()


@pytest.mark.parametrize("key", ["verl_i80", "verl_ry3"])
def test_real_verl_logs_add_up_and_split_gen_from_the_log(real, key):
    con, ids = real
    found = budget(con, ids[key])
    assert len(found) > 100
    assert_adds_up(found)
    *steps, whole = found
    # the log names no GPU count: per-GPU figures, said so
    assert {(r["gpus"], r["gpus_from"]) for r in found} == {(1, "unknown: per GPU")}
    assert {r["basis"] for r in steps} == {"verl log"} and whole["basis"] == "verl log"
    assert all(r["gen_tail_idle"] is None and r["gen_imbalance_idle"] is None for r in found)
    # the gen columns are the step's timing_s/gen; logprob is old_log_prob + ref (stage_breakdown)
    stages = {r["step"]: r for r in rows(con, "stage_breakdown", ids[key])}
    for r in steps:
        stage = stages[r["step"]]
        assert close(sum(r[c] or 0.0 for c in GEN), stage["gen_s"]), r
        assert close(r["logprob"], stage["old_log_prob_s"] + stage["ref_s"]), r
        assert r["gen_overhead"] >= 0 and r["gen_long_tail"] >= 0
    assert whole["weight_sync"] is None  # no weight-sync timer in these logs
    # finding_gen_long_tail says the budget's own long-tail share, over the steps it splits so
    tail = rows(con, "finding_gen_long_tail", ids[key])
    share = whole["gen_long_tail"] / sum(r["gpu_s"] for r in steps if r["gen_long_tail"] is not None)
    assert [r["value"] for r in tail] == ([pytest.approx(share)] if share >= 0.1 else [])
    # its seconds are written with thousands separators (ry3hgbx5: 14,240.7 s)
    assert all(re.search(r"over \d+ steps \(\d{1,3}(,\d{3})*\.\d s; worst", r["text"]) for r in tail)


def test_real_packed_runs_need_a_time_and_take_the_simulated_one(real):
    con, ids = real
    before = budget(con, ids["dapo"])
    # packed lengths only: six steps known to the engines, not one second of them timed
    assert [r["step"] for r in before] == [0, 1, 2, 3, 4, 5, None]
    assert all(r["step_s"] is None and r["basis"] == "packed lengths" for r in before)
    assert {(r["gpus"], r["gpus_from"]) for r in before} == {(8, "run_ranks.gpus_from_ranks")}
    for key in ("dapo", "rllm"):
        simulate_and_store(con, ids[key])
        found = budget(con, ids[key])
        assert_adds_up(found)
        steps = found[:-1]
        assert all(r["gen_from"] == GRID and r["step_from"] == "sum of stages" for r in steps)
        # On the tokens basis the slowest engine holds the longest response: no dispatch ends
        # the rollout sooner, so every idle second is tail.
        assert all(r["gen_imbalance_idle"] == 0 for r in steps)
        # as-recorded rollout times, x 8 GPUs, split into busy and tail idle
        simulated = {s: p for s, p in con.execute(
            "SELECT step, predicted_s FROM whatif WHERE run_id = ? AND policy = 'as-recorded' "
            "AND engine IS NULL", [ids[key]]).fetchall()}
        for r in steps:
            assert close(r["gen_busy"] + r["gen_tail_idle"], simulated[r["step"]] * 8), r
    rllm = {r["step"]: r for r in budget(con, ids["rllm"])}
    for r in rows(con, "reward_imbalance", ids["rllm"]):
        assert close(rllm[r["step"]]["reward"], r["max_s"] * 8)


# ---- POST /api/runs/{id}/whatif: the run's own calibration -------------------------------------

def _verl_log(steps: int) -> bytes:
    """A verl console log whose gen time grows with the longest response."""
    lines = [f"step:{s} - timing_s/gen:{2.0 + 0.01 * (100 + 37 * s)} - timing_s/step:{10.0 + s} - "
             f"response_length/mean:{50 + 5 * s} - response_length/max:{100 + 37 * s}"
             for s in range(1, steps + 1)]
    return "\n".join(lines).encode() + b"\n"


PACKED = (b'{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3]}\n'
          b'{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [5, 7]}\n')


def _upload(srv, name: str, body: bytes) -> str:
    r = httpx.post(f"{srv.url}/api/runs", files=[("file", (name, body))], timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["run_id"]


def _post_whatif(srv, run_id: str) -> dict:
    r = httpx.post(f"{srv.url}/api/runs/{run_id}/whatif", timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_whatif_fits_a_timed_log_and_simulates_a_packed_trace_on_the_grid(make_server):
    srv = make_server()
    verl, packed = _upload(srv, "output.log", _verl_log(6)), _upload(srv, "packed_lengths_step_0.jsonl", PACKED)

    body = _post_whatif(srv, verl)
    assert body["calibration"] == "log" and body["policies"] == ["as-recorded", "cap:161"]
    stored = srv.app.state.db.read(lambda cur: cur.execute(
        "SELECT (SELECT list(DISTINCT calibration) FROM whatif WHERE run_id = $r), "
        "(SELECT count(*) FROM gen_forecast WHERE run_id = $r)", {"r": verl}).fetchone(), 10_000, "whatif")
    # six steps fitted (response max 137 ... 322, cap 322 // 2 = 161); steps 4-6 validated forward
    assert stored == (["log"], 3) and body["rows"] == 2 * 6

    body = _post_whatif(srv, packed)
    assert body["calibration"] == H200_REPLAY_GRID.source
    budget = httpx.get(f"{srv.url}/api/queries/step_budget", params={"run_id": packed}).json()
    step = dict(zip(budget["columns"], budget["rows"][0]))
    assert step["gen_from"] == GRID and step["basis"] == "packed lengths"


def test_whatif_fits_engine_times_where_every_engine_timed_its_rollout():
    """rank_stage 'gen' on two steps (the packed golden case): the per-engine model of the log."""
    from polytrace.server.routers.simulate import simulate

    con = load_case("packed")
    try:
        body = simulate("r1", con)
        assert body["calibration"] == "log" and "length-balanced" in body["policies"]
        assert con.execute("SELECT DISTINCT model FROM gen_forecast WHERE run_id = 'r1'").fetchall() == \
            [("log:engine",)]
    finally:
        con.close()

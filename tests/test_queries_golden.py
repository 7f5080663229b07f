"""Golden tests of the query catalog: hand-derived answers on tiny fixtures, then the real traces.

Each `tests/golden/<query>__<case>[__<variant>].csv` is the expected output of the
catalog query on the tables of `tests/fixtures/golden/<case>/`, for run r1 unless the
variant says otherwise (tests/goldens.py runs them). tests/fixtures/golden/README.md
derives every number by hand.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from polytrace import store
from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.store.aggregates import on_the_fly
from tests.goldens import VARIANTS, case_names, golden_files, golden_mismatches, load_case, same_rows

GOLDEN_FILES = golden_files()


def run(con, name: str, **params):
    query = load_catalog()[name]
    result = run_bound(con, query, bind(query, params))
    return result.columns, result.rows


def as_dicts(con, name: str, **params) -> list[dict]:
    columns, rows = run(con, name, **params)
    return [dict(zip(columns, r)) for r in rows]


@pytest.fixture(scope="module")
def cases():
    cons = {case: load_case(case) for case in case_names()}
    yield cons
    for con in cons.values():
        con.close()


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden(cases, path: Path):
    assert golden_mismatches(path, cases) == []


def test_every_variant_has_its_golden():
    assert {p.stem for p in GOLDEN_FILES} >= set(VARIANTS)


@pytest.mark.parametrize("name", ["length_stats", "length_histogram", "rollout_tail", "dp_imbalance",
                                  "reward_imbalance", "multiturn", "filter_waste", "run_summary",
                                  "runs"])
def test_each_foundation_query_has_a_nonempty_golden(name):
    files = [p for p in GOLDEN_FILES if p.stem.split("__")[0] == name]
    assert any(len(p.read_text().splitlines()) > 1 for p in files), name


def _per_run_queries():
    """Catalog queries that need nothing but a run_id."""
    return [q for q in load_catalog().values()
            if {p.name for p in q.params if p.required} == {"run_id"}]


def test_aggregates_equal_the_raw_computation_on_every_case(cases):
    """The materialized tables are an exact cache: computing them on the fly changes nothing."""
    for case, con in cases.items():
        for run_id in ("r1", "r2"):
            for query in _per_run_queries():
                bound = bind(query, {"run_id": run_id})
                cached = con.execute(query.sql, bound).fetchall()
                raw = con.execute(on_the_fly(query.sql), bound).fetchall()
                assert same_rows(cached, raw), (case, run_id, query.name)


# ---- real traces --------------------------------------------------------------------------

POLYTRACE_RUNS = {
    "dapo": "polytrace/verl/profile/packed_length_log/20260614_023133",
    "rllm": "polytrace/rllm/profile/packed_length_log/20260616_024512",
    "search": "polytrace/search_r1/profile/multiturn_workload_log/0617_0223",
}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    con = store.open(tmp_path_factory.mktemp("real") / "real.duckdb")
    ids = {key: ingest_paths(con, [SHARED_DATA / rel]).run_id for key, rel in POLYTRACE_RUNS.items()}
    yield con, ids
    con.close()


def test_real_runs_aggregates_equal_raw(real):
    con, ids = real
    for key, run_id in ids.items():
        for query in _per_run_queries():
            bound = bind(query, {"run_id": run_id})
            cached = con.execute(query.sql, bound).fetchall()
            raw = con.execute(on_the_fly(query.sql), bound).fetchall()
            assert same_rows(cached, raw), (key, query.name, cached, raw)


def test_real_dapo_facts(real):
    con, ids = real
    run_id = ids["dapo"]
    stats = as_dicts(con, "length_stats", run_id=run_id)
    assert [r["n"] for r in stats] == [768] * 6  # 96 prompts x 8 samples per step
    tail = as_dicts(con, "rollout_tail", run_id=run_id)
    assert {(r["step"], r["dp_rank"]): r["n"] for r in tail} == {
        (s, d): 384 for s in range(6) for d in (0, 1)}
    imbalance = as_dicts(con, "dp_imbalance", run_id=run_id)
    assert [r["ranks"] for r in imbalance] == [2] * 6
    assert all(r["imbalance"] >= 1 for r in imbalance)
    hist = as_dicts(con, "length_histogram", run_id=run_id)
    assert sum(r["responses"] for r in hist) == 6 * 768
    assert math.isclose(hist[-1]["cum_share"], 1.0)
    # dapo_filter_indices.jsonl, first two lines: 96 prompts; kept/used 27/27, then 33/5
    waste = as_dicts(con, "filter_waste", run_id=run_id)
    assert [(r["prompts"], r["kept"], r["used"]) for r in waste[:2]] == [(96, 27, 27), (96, 33, 5)]
    assert waste[1]["trained_tokens"] < waste[0]["trained_tokens"]


def test_real_rllm_reward_facts(real):
    con, ids = real
    rows = as_dicts(con, "reward_imbalance", run_id=ids["rllm"])
    assert [r["ranks"] for r in rows] == [2, 2, 2]
    # reward_timings_step_0.jsonl: rank 0 took 77.343 s, rank 4 took 87.059 s
    assert rows[0]["slowest_rank"] == 4
    assert math.isclose(rows[0]["max_s"], 87.05907697230577)
    assert math.isclose(rows[0]["mean_s"], (77.34310807101429 + 87.05907697230577) / 2)


def test_real_search_multiturn_facts(real):
    con, ids = real
    rows = as_dicts(con, "multiturn", run_id=ids["search"])
    assert [r["rollouts"] for r in rows] == [2048, 2048, 2048]
    assert all(r["turns_max"] >= r["turns_mean"] >= 1 for r in rows)
    assert all(0 < r["prefix_cache_hit"] < 1 for r in rows)
    # no dp_rank in the multi-turn log: no engine or rank analysis to pretend
    assert as_dicts(con, "rollout_tail", run_id=ids["search"]) == []


@pytest.mark.parametrize("key", sorted(POLYTRACE_RUNS))
def test_real_run_summary_agrees_with_the_per_step_queries(real, key):
    con, ids = real
    run_id = ids[key]
    (summary,) = as_dicts(con, "run_summary", run_id=run_id)
    idle = {r["step"]: r["rollout_idle_frac"] for r in as_dicts(con, "rollout_tail", run_id=run_id)}
    tails = {r["step"]: r["tail_ratio"] for r in as_dicts(con, "length_stats", run_id=run_id)}
    dp = {r["step"]: r["imbalance"] for r in as_dicts(con, "dp_imbalance", run_id=run_id)}
    reward = [r["imbalance"] for r in as_dicts(con, "reward_imbalance", run_id=run_id)]
    waste = as_dicts(con, "filter_waste", run_id=run_id)

    def close(a, b):
        return (a is None and b is None) or math.isclose(a, b, rel_tol=1e-12)

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    assert close(summary["rollout_idle_frac_mean"], mean(list(idle.values())))
    assert close(summary["rollout_idle_frac_worst"], max(idle.values(), default=None))
    if idle:
        assert idle[summary["worst_idle_step"]] == summary["rollout_idle_frac_worst"]
    assert close(summary["tail_ratio_worst"], max(tails.values()))
    assert tails[summary["worst_tail_step"]] == summary["tail_ratio_worst"]
    assert close(summary["dp_imbalance_mean"], mean(list(dp.values())))
    assert close(summary["dp_imbalance_max"], max(dp.values(), default=None))
    assert close(summary["reward_imbalance_mean"], mean(reward))
    wasted = sum(r["wasted_tokens"] for r in waste)
    generated = sum(r["response_tokens"] for r in waste)
    assert close(summary["wasted_token_frac"], wasted / generated if generated else None)
    assert summary["samples"] == sum(r["n"] for r in as_dicts(con, "length_stats", run_id=run_id))


def test_real_kineto_run_counts_profiler_steps_and_gpu_idle(shared_data, tmp_path):
    con = store.open(tmp_path / "k.duckdb")
    try:
        run_id = ingest_paths(con, [shared_data / "kineto/trace_filter/sampled_rank-0.json.gz"]).run_id
        profiler_steps = con.execute("SELECT count(DISTINCT step) FROM profiler_steps WHERE run_id = ?",
                                     [run_id]).fetchone()[0]
        assert profiler_steps == 2  # the data README: 2 profiler steps
        (runs_row,) = [r for r in as_dicts(con, "runs") if r["run_id"] == run_id]
        (summary,) = as_dicts(con, "run_summary", run_id=run_id)
        assert runs_row["steps"] == summary["steps"] == profiler_steps
        whole = [r for r in as_dicts(con, "gpu_time", run_id=run_id) if r["step"] is None]
        assert whole
        assert summary["gpu_idle_frac_mean"] == pytest.approx(
            sum(r["idle_pct"] for r in whole) / len(whole) / 100, rel=1e-9)
        # One rank's trace: no worst rank to single out.
        assert len(whole) == 1 and summary["gpu_idle_rank"] is None
        assert summary["gpu_idle_frac_worst"] is None
        assert summary["gpu_compute_frac_mean"] == pytest.approx(
            sum(r["compute_pct"] for r in whole) / len(whole) / 100, rel=1e-9)
    finally:
        con.close()


def test_real_verl_run_summary_agrees_with_rollout_tail_verl(shared_data, tmp_path):
    log = next((shared_data / "verl-logs").glob("*.output.log"))
    con = store.open(tmp_path / "v.duckdb")
    try:
        run_id = ingest_paths(con, [log]).run_id
        (summary,) = as_dicts(con, "run_summary", run_id=run_id)
        tail = as_dicts(con, "rollout_tail_verl", run_id=run_id)
        shares = [r["slowest_share"] for r in tail if r["slowest_share"] is not None]
        clips = [r["response_clip_ratio"] for r in tail if r["response_clip_ratio"] is not None]
        assert shares and clips
        assert summary["slowest_gen_share"] == pytest.approx(sum(shares) / len(shares), rel=1e-12)
        assert summary["cap_ratio"] == pytest.approx(sum(clips) / len(clips), rel=1e-12)
        assert summary["mean_step_s"] > 0 and summary["samples"] is None
    finally:
        con.close()

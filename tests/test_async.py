"""Async RL: the per-sample and the logged staleness paths agree, and the async findings fire on
the runs that call for them and on no other (tests/fixtures/golden/async, derived in its README)."""
from __future__ import annotations

import pytest

from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.runner import run_bound
from tests.goldens import load_case

ASYNC_FINDINGS = ("finding_staleness_bound", "finding_trainer_starved", "finding_rollouter_idle",
                  "finding_stale_waste", "finding_staleness_drift")


@pytest.fixture(scope="module")
def con():
    c = load_case("async")
    yield c
    c.close()


def rows(con, name, run_id):
    q = load_catalog()[name]
    r = run_bound(con, q, bind(q, {"run_id": run_id}))
    return [dict(zip(r.columns, row)) for row in r.rows]


def test_the_per_sample_path_agrees_with_the_logged_path(con):
    per_sample = rows(con, "async_staleness", "r1")
    logged = rows(con, "async_staleness", "r2")
    assert [r["basis"] for r in per_sample] == ["per-sample"] * 2
    assert [r["basis"] for r in logged] == ["logged"] * 2
    for a, b in zip(per_sample, logged):
        assert (a["step"], a["staleness_min"], a["staleness_max"]) == (b["step"], b["staleness_min"], b["staleness_max"])
        assert a["staleness_mean"] == pytest.approx(b["staleness_mean"], rel=1e-12)
        assert a["staleness_mean"] == pytest.approx(a["logged_staleness_mean"], rel=1e-12)


def test_staleness_above_its_bound_after_a_resume_is_critical(con):
    (finding,) = rows(con, "finding_staleness_bound", "r3")
    assert (finding["severity"], finding["value"], finding["steps"]) == ("critical", 3.0, [3, 4])


def test_a_healthy_on_policy_async_run_raises_no_async_alarm_and_says_so_once(con):
    assert all(rows(con, name, "r4") == [] for name in ASYNC_FINDINGS)
    (note,) = rows(con, "finding_async_on_policy", "r4")
    assert note["severity"] == "info"


def test_a_synchronous_run_has_no_async_rows_but_its_weight_sync_is_said(con):
    assert rows(con, "async_staleness", "r5") == [] and rows(con, "async_budget", "r5") == []
    (finding,) = rows(con, "finding_weight_sync", "r5")
    assert finding["value"] == pytest.approx(0.2) and finding["evidence"].startswith("/api/queries/step_budget")


def test_the_step_budget_of_an_async_run_points_to_the_pools_and_a_sync_one_does_not(con):
    """r1 gives its pools' GPUs but not the job's, so its caveat says both."""
    assert {r["caveat"] for r in rows(con, "step_budget", "r1")} == {
        "GPU count unknown: every figure is per GPU (give the job's GPU count at ingest). An async run: "
        "these bars split the trainer's step as if every stage held every GPU; async_budget splits each pool."}
    assert all("async" not in (r["caveat"] or "") for r in rows(con, "step_budget", "r5"))


def test_a_verl_rollout_dump_with_weight_versions_gives_per_sample_staleness(tmp_path):
    """Step 5 (consume version 4): one sample of version 4 (staleness 0), one generated across
    versions 2..3 (staleness 2: in flight 1, in the queue 1), one with no versions (no row)."""
    from polytrace import store
    from polytrace.ingest.load import ingest_paths

    dump = tmp_path / "5.jsonl"
    dump.write_text(
        '{"input": "1+1=", "output": "2", "score": 1.0, "step": 5, "min_global_steps": 4, "max_global_steps": 4}\n'
        '{"input": "1+1=", "output": "two", "score": 1.0, "step": 5, "min_global_steps": 2, "max_global_steps": 3}\n'
        '{"input": "2+2=", "output": "4", "score": 1.0, "step": 5, "acc": true}\n')
    con = store.open(tmp_path / "d.duckdb")
    try:
        run_id = ingest_paths(con, [dump]).run_id
        (row,) = rows(con, "async_staleness", run_id)
        assert (row["basis"], row["trajectories"], row["staleness_min"], row["staleness_mean"],
                row["staleness_max"]) == ("per-sample", 2, 0.0, 1.0, 2.0)
        (lag,) = rows(con, "async_lag", run_id)
        assert (lag["in_flight_mean"], lag["in_queue_mean"]) == (0.5, 0.5)
        assert con.execute("SELECT key FROM sample_metrics WHERE run_id = ?", [run_id]).fetchall() == [("acc",)]
    finally:
        con.close()


def test_areal_session_trace_gives_each_session_its_outcome_and_times(tmp_path):
    """The format's sample: accepted (submitted 100, generating 100.5 to 103.5 over two phases,
    finalized 104), rejected (100.5 to 102.5) and failed (no phase)."""
    from polytrace import store
    from polytrace.ingest.formats import areal_sessions
    from polytrace.ingest.load import ingest_paths

    sample = areal_sessions.sample()
    path = tmp_path / "sessions-r0.jsonl"
    path.write_bytes(sample.files["sessions-r0.jsonl"])
    con = store.open(tmp_path / "a.duckdb")
    try:
        run_id = ingest_paths(con, [path]).run_id
        got = {(r["status"], r["reason"]): (r["trajectories"], r["wait_s_mean"], r["gen_s_mean"])
               for r in rows(con, "async_lifecycle", run_id)}
        assert got == {("accepted", None): (1, 0.5, 3.0), ("filtered", "rejected"): (1, 0.5, 2.0),
                       ("failed", "workflow_exception"): (1, None, None)}
    finally:
        con.close()


def test_a_file_written_by_verls_own_file_logger_reads_as_the_hand_typed_twin(con, tmp_path):
    """verl's FileLogger (verl 0.9.1 verl/utils/tracking.py, run by
    tests/fixtures/frameworks/real/make_real.py) wrote golden r2's metrics as numpy scalars: read
    back, every async answer equals r2's from the hand-typed tables, and the queue and drop totals
    it adds come out per step."""
    from pathlib import Path

    from polytrace import store
    from polytrace.ingest.load import ingest_paths

    real = Path(__file__).parent / "fixtures" / "frameworks" / "real" / "verl" / "fully_async.jsonl"
    db = store.open(tmp_path / "real.duckdb", "w")
    try:
        run = ingest_paths(db, [real], run_overrides={"framework": "verl", "max_staleness": 2}).run_id
        assert db.execute("SELECT format FROM runs WHERE run_id = ?", [run]).fetchall() == [("verl-jsonl",)]
        same = [n for n in ("async_staleness", "async_idle", "async_budget", *ASYNC_FINDINGS,
                            "finding_async_on_policy") if n != "finding_stale_waste"]
        for name in same:
            mine = [{k: v.replace(run, "r2") if isinstance(v, str) else v for k, v in r.items()}
                    for r in rows(db, name, run)]  # the evidence URLs name the run
            assert mine == rows(con, name, "r2"), name
        queue = rows(db, "async_queue", run)
        drops = rows(db, "async_drops", run)
        (waste,) = rows(db, "finding_stale_waste", run)
    finally:
        db.close()
    assert [(r["step"], r["queue_depth"]) for r in queue] == [(2, 3), (3, 5)]
    assert [(r["step"], r["dropped_stale"], r["generated"]) for r in drops] == [(2, 1, 4), (3, 0, 2)]
    # 1 + 0 dropped of 4 + (6 - 4) generated: the drops the hand-typed twin does not carry
    assert waste["value"] == pytest.approx(1 / 6)


def test_a_followed_async_run_gains_its_staleness_and_idle_step_by_step(tmp_path, capsys):
    """`polytrace watch --once` after each line verl's FileLogger wrote: the live append path
    (append_chunk) gives the async answers of the steps landed so far, and the findings follow."""
    from pathlib import Path

    from polytrace import store
    from polytrace.cli import main
    from polytrace.ingest.live import live_run_id
    from polytrace.queries import findings

    lines = (Path(__file__).parent / "fixtures" / "frameworks" / "real" / "verl" / "fully_async.jsonl"
             ).read_text().splitlines(keepends=True)
    folder, db = tmp_path / "run", tmp_path / "live.duckdb"
    folder.mkdir()
    run = live_run_id(folder)
    seen = []
    for line in lines:
        with (folder / "metrics.jsonl").open("a") as f:
            f.write(line)
        assert main(["watch", str(folder), "--db", str(db), "--once"]) == 0
        c = store.open(db, "r")
        try:
            seen.append(([(r["step"], r["staleness_max"]) for r in rows(c, "async_staleness", run)],
                         [(r["step"], r["trainer_wait_s"]) for r in rows(c, "async_idle", run)],
                         sorted(f["kind"] for f in findings.findings(c, run))))
        finally:
            c.close()
    capsys.readouterr()
    assert seen[0][:2] == ([(2, 1.0)], [(2, 2.0)])
    assert seen[1][:2] == ([(2, 1.0), (3, 2.0)], [(2, 2.0), (3, 1.0)])
    # over both steps the trainer waited 3 of 20 s (15%) and the engines 5 of 20 s (25%)
    assert {"trainer_starved", "rollouter_idle"} <= set(seen[1][2])

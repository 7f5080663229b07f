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

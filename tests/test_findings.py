"""Findings: one list for the API, the CLI and the pages; every one backed by a catalog URL."""
from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from polytrace.queries import overview
from polytrace.queries.findings import findings, stored
from polytrace.server.app import create_app
from polytrace.server.watch import BUSY_SHARE, DROPPED_AT_MOST, OVERVIEW_EVERY_S, OverviewLines
from polytrace.settings import Settings
from polytrace.store.runs import changed
from tests.goldens import load_case

RUNS = ("r1", "r2", "r3", "r4", "r5", "r6")


@pytest.fixture(scope="module")
def case_db(tmp_path_factory):
    """The golden case as a database file, and a copy for the CLI (the server holds the first)."""
    folder = tmp_path_factory.mktemp("findings")
    load_case("findings", str(folder / "server.duckdb")).close()
    shutil.copy(folder / "server.duckdb", folder / "cli.duckdb")
    return folder


@pytest.fixture(scope="module")
def client(case_db):
    with TestClient(create_app(Settings(db=str(case_db / "server.duckdb"))),
                    base_url="http://127.0.0.1") as c:
        yield c


def api_findings(client, run_id: str) -> list[dict]:
    r = client.get(f"/api/runs/{run_id}/findings")
    assert r.status_code == 200, r.text
    return r.json()["findings"]


def test_the_api_cli_and_module_give_one_list(client, case_db, capsys):
    db = case_db / "cli.duckdb"
    for run_id in RUNS:
        listed = api_findings(client, run_id)
        assert main(["findings", run_id, "--db", str(db), "--output", "json"]) == 0
        assert json.loads(capsys.readouterr().out) == listed
        con = store.open(db, "r")
        try:
            assert json.loads(json.dumps(findings(con, run_id))) == listed
        finally:
            con.close()


def test_most_severe_first_and_silent_when_nothing_to_say(client):
    kinds = [(f["severity"], f["kind"]) for f in api_findings(client, "r4")]
    assert kinds == [("critical", "cap_hits"), ("warn", "dp_imbalance"), ("warn", "rollout_tail"),
                     ("info", "filter_waste"), ("info", "reward_imbalance"), ("info", "whatif")]
    assert api_findings(client, "r2") == []  # every threshold missed by a hair


def test_every_evidence_url_answers_with_rows(client):
    checked = 0
    for run_id in RUNS:
        for f in api_findings(client, run_id):
            assert set(f) == {"kind", "severity", "value", "unit", "steps", "stage", "text", "evidence"}
            r = client.get(f["evidence"])
            assert r.status_code == 200 and r.json()["rows"], (f["kind"], f["evidence"])
            checked += 1
    assert checked == 4 + 2 + 6 + 4 + 1  # r1, r3, r4, r5, r6; r2 says nothing


def test_an_unknown_run_is_404(client):
    r = client.get("/api/runs/nope/findings")
    assert r.status_code == 404 and r.json() == {"ok": False, "error": "unknown run 'nope'", "status": 404}


def kept_text(con, run_id: str, text: str) -> None:
    """Rewrite the sentence of every finding in the list the run's overview line keeps."""
    (kept,), = con.execute("SELECT findings FROM run_overview WHERE run_id = ?", [run_id]).fetchall()
    con.execute("UPDATE run_overview SET findings = ? WHERE run_id = ?",
                [json.dumps([{**f, "text": text} for f in json.loads(kept)]), run_id])


def test_the_server_reads_the_kept_list_unless_an_append_changed_the_run(case_db, tmp_path):
    """The server reads each run's list as its last write kept it; an append drops it in its own
    transaction, and until the run is summed up again (a moment later)
    its list is computed as it is read."""
    db = tmp_path / "own.duckdb"
    shutil.copy(case_db / "cli.duckdb", db)
    with TestClient(create_app(Settings(db=str(db))), base_url="http://127.0.0.1") as c:
        app = c.app
        # the server summed every run up as it started; mark r4's kept sentences to tell them apart
        app.state.db.write(lambda cur: kept_text(cur, "r4", "as stored"))
        assert {f["text"] for f in api_findings(c, "r4")} == {"as stored"}
        app.state.db.write(lambda cur: changed(cur, "r4"), ["r4"])  # what an append does to them
        app.state.overview_lines.mark("r4")  # and what it asks of the next refresh
        computed = api_findings(c, "r4")
        assert len(computed) == 6 and "as stored" not in {f["text"] for f in computed}
        assert api_findings(c, "r3") != [] and "as stored" not in c.get("/runs/r4").text
        assert app.state.overview_lines.flush(force=True) == ["r4"]  # its refresh stores the list again
        assert api_findings(c, "r4") == computed


def test_a_refresh_leaves_a_run_pending_when_it_had_another_append_meanwhile(tmp_path):
    con = load_case("findings", str(tmp_path / "lines.duckdb"))
    try:
        lines = OverviewLines(lambda fn, runs: fn(con))
        lines.mark("r1")
        lines.mark("r2")
        assert sorted(lines.flush(force=True)) == ["r1", "r2"]
        assert lines.flush(force=True) == []  # refreshed: nothing pending

        def refresh_during_an_append(fn, runs):
            fn(con)
            lines.mark("r1")  # the next append lands while the refresh is being written
        lines.write = refresh_during_an_append
        lines.mark("r1")
        assert lines.flush(force=True) == ["r1"]
        lines.write = lambda fn, runs: fn(con)
        assert lines.flush(force=True) == ["r1"]  # still pending: its refresh missed that append
        assert lines.flush(force=True) == []
    finally:
        con.close()


def test_the_cli_says_when_there_is_nothing(case_db, capsys):
    db = str(case_db / "cli.duckdb")
    assert main(["findings", "r2", "--db", db]) == 0
    assert capsys.readouterr().err == "nothing to report on run r2\n"
    assert main(["findings", "nope", "--db", db]) == 2


# ---- the shared real runs -------------------------------------------------------------------

REAL = {
    "collapsing verl log": ("verl-logs/qwen3-4b-agent-run-i80f2v90.output.log", {},
                            [("critical", "collapse"), ("warn", "length_drift")]),
    "verl log with a long tail": ("verl-logs/qwen3-4b-agent-run-ry3hgbx5.output.log", {},
                                  [("warn", "gen_long_tail")]),
    "DAPO": ("polytrace/verl/profile/packed_length_log/20260614_023133", {},
             [("warn", "filter_waste"), ("warn", "rollout_tail")]),
    "rLLM with its cap": ("polytrace/rllm/profile/packed_length_log/20260616_024512",
                          {"max_response_len": 16000},
                          [("warn", "cap_hits"), ("info", "dp_imbalance"), ("info", "reward_imbalance")]),
    "video": ("polytrace/verl-video/profile/packed_length_log/20260609_033329", {},
              [("warn", "rollout_tail")]),
    "search-R1": ("polytrace/search_r1/profile/multiturn_workload_log/0617_0223", {}, []),
    "kineto": ("kineto/trace_filter", {}, [("warn", "gpu_idle")]),
}


@pytest.mark.shared_data
@pytest.mark.parametrize("label", sorted(REAL))
def test_findings_on_the_shared_runs(shared_data, tmp_path, label):
    path, facts, expected = REAL[label]
    con = store.open(tmp_path / "real.duckdb")
    try:
        run_id = ingest_paths(con, [shared_data / path], run_overrides=facts).run_id
        found = findings(con, run_id)
    finally:
        con.close()
    assert [(f["severity"], f["kind"]) for f in found] == expected
    for f in found:
        assert "\n" not in f["text"] and f["text"].endswith(".")


def one_finding(shared_data, tmp_path, label: str, kind: str) -> dict:
    """The finding of `kind` on the shared run REAL[label], ingested without its run facts."""
    con = store.open(tmp_path / "real.duckdb")
    try:
        run_id = ingest_paths(con, [shared_data / REAL[label][0]]).run_id
        (found,) = [f for f in findings(con, run_id) if f["kind"] == kind]
    finally:
        con.close()
    return found


@pytest.mark.shared_data
def test_the_collapse_is_dated_as_the_log_shows_it(shared_data, tmp_path):
    """i80f2v90: response_length/mean is 4.8 at step 11, 1.0 from step 12; steps 20, 30, ... log
    no length; 225 steps from 12 to 261 have one."""
    collapse = one_finding(shared_data, tmp_path, "collapsing verl log", "collapse")
    assert collapse["steps"][:3] == [12, 13, 14] and collapse["steps"][-1] == 261
    assert collapse["value"] == 225 and 10 not in collapse["steps"] and 20 not in collapse["steps"]
    # the steps the log left out are not counted, and the text says so
    assert "from step 12 to the end of the log (225 logged steps of 250)" in collapse["text"]


@pytest.mark.shared_data
def test_two_reward_ranks_are_told_apart_by_their_tokens(shared_data, tmp_path):
    """rLLM's reward_timings: rank 0 took 77.3, 78.5, 113.0 s with 630,511, 639,625, 336,008
    response tokens; rank 4 took 87.1, 46.1, 43.3 s with 703,193, 822,876, 638,491. At steps 1 and
    2 the slower rank (0) had the fewer tokens."""
    reward = one_finding(shared_data, tmp_path, "rLLM with its cap", "reward_imbalance")
    assert "56 s of waiting over 3 steps" in reward["text"]
    assert "the slower of the two ranks had fewer response tokens in 2 of 3 steps, so look at that " \
           "rank's verifier or sandbox" in reward["text"]


def test_a_refresh_sums_up_off_the_writer_and_drops_sums_that_an_append_overtook(tmp_path):
    """In a server, a run is summed up without the writer, which is taken only to keep the sums; sums
    made while the run was written are not its own and are dropped (the run stays pending), and
    after DROPPED_AT_MOST of them in a row the refresh holds the writer throughout."""
    con = load_case("findings", str(tmp_path / "off.duckdb"))
    generation, writing, summed_while_writing = {"r1": 0}, [False], []

    def write(fn, runs):
        writing[0] = True
        try:
            return fn(con)
        finally:
            writing[0] = False

    def read(fn):
        summed_while_writing.append(writing[0])
        return fn(con)

    def read_overtaken(fn):  # an append lands while the sums are made
        got = read(fn)
        generation["r1"] += 1
        lines.mark("r1")
        return got

    def unsummed() -> None:
        con.execute("DELETE FROM run_overview WHERE run_id = 'r1'")
        lines.mark("r1")
    try:
        lines = OverviewLines(write, read=read, generation=generation.__getitem__)
        unsummed()
        assert lines.flush(force=True) == ["r1"] and lines.flush(force=True) == []
        assert summed_while_writing == [False] and stored(con, "r1") is not None  # kept
        lines.read = read_overtaken
        unsummed()
        for _ in range(DROPPED_AT_MOST):
            assert lines.flush(force=True) == ["r1"]
            assert stored(con, "r1") is None  # dropped: still pending
        assert len(summed_while_writing) == 1 + DROPPED_AT_MOST
        assert lines.flush(force=True) == ["r1"]  # under the writer now: no sums made off it
        assert len(summed_while_writing) == 1 + DROPPED_AT_MOST and stored(con, "r1") is not None
        assert lines.flush(force=True) == []
    finally:
        con.close()


@pytest.mark.shared_data
def test_an_inferred_cap_is_said(shared_data, tmp_path):
    """rLLM without --max-response-len: 59 of its 384 responses are exactly 16,000 tokens."""
    cap = one_finding(shared_data, tmp_path, "rLLM with its cap", "cap_hits")
    assert "(inferred: 15.4% of all responses are exactly 16,000 tokens long)" in cap["text"]
    assert cap["value"] == pytest.approx(8 / 128)


def test_a_run_whose_refresh_is_long_is_refreshed_less_often_during_a_burst(monkeypatch):
    """A refresh holds the writer: during a burst of appends, a run's comes no more often than
    every OVERVIEW_EVERY_S, nor than its share of the time passes BUSY_SHARE; a run gone quiet
    gets it at once. The test moves the clock: the writer is free after `wait` s, and the
    refresh takes what it says; the wait is not the refresh's."""
    now = [100.0]
    # the writer hands the refresh how long it takes, in place of a connection
    monkeypatch.setattr(overview, "refresh", lambda seconds, runs: now.__setitem__(0, now[0] + seconds))

    def lines_taking(seconds: float, wait: float = 0.0) -> OverviewLines:
        def write(fn, runs):
            now[0] += wait
            return fn(seconds)
        return OverviewLines(write, clock=lambda: now[0])

    def append_and_flush(lines: OverviewLines, at: float) -> list[str]:
        now[0] = at
        lines.mark("r1")
        return lines.flush()

    slow = lines_taking(1.0)  # every 1.0 / BUSY_SHARE s
    assert BUSY_SHARE == 0.2 and OVERVIEW_EVERY_S == 2.0
    assert append_and_flush(slow, 100.0) == ["r1"]
    assert append_and_flush(slow, 102.5) == []  # due after 2 s at the fastest, but it took 1 s
    assert append_and_flush(slow, 104.9) == []
    assert append_and_flush(slow, 105.0) == ["r1"]
    assert append_and_flush(slow, 106.5) == []
    now[0] = 107.6  # quiet since its append at 106.5
    assert slow.flush() == ["r1"]

    fast = lines_taking(0.1)
    assert append_and_flush(fast, 100.0) == ["r1"]
    assert append_and_flush(fast, 101.9) == []
    assert append_and_flush(fast, 102.0) == ["r1"]

    waited = lines_taking(0.1, wait=3.0)  # a quick refresh behind a long write: every 2 s still
    assert append_and_flush(waited, 100.0) == ["r1"]
    assert append_and_flush(waited, 102.0) == ["r1"]


@pytest.mark.parametrize("run, kinds", [("r1", ["length_tail"]), ("r2", []), ("r3", ["length_drift"]),
                                        ("r4", ["length_drift"])])
def test_length_cases_raise_only_their_finding(run, kinds):
    """tests/fixtures/golden/lengths (derived in its README): a partial last step raises nothing,
    a tail is not drift, and no other finding speaks on these runs."""
    from polytrace.queries.findings import compute
    from tests.goldens import load_case

    from polytrace.queries.catalog import bind, load_catalog
    from polytrace.queries.runner import run_bound

    con = load_case("lengths")
    try:
        assert [f["kind"] for f in compute(con, run)] == kinds
        q = load_catalog()["run_summary"]
        summary = run_bound(con, q, bind(q, {"run_id": run}))
        # r2 and r3 end in a step cut short, which the run's headline counts
        assert dict(zip(summary.columns, summary.rows[0]))["partial_steps"] == (1 if run in ("r2", "r3") else None)
    finally:
        con.close()

"""Dashboard logic without a browser: server-side downsampling, headline sentences, page routes."""
from __future__ import annotations

import re

import httpx

from polytrace import store
from polytrace.queries.catalog import SECTIONS, Column
from polytrace.queries.display import downsample
from polytrace.server.headlines import findings, fmt
from polytrace.server.routers.pages import RUN_SECTIONS, compare_queries, run_chart_queries

PACKED = (
    '{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3], "validate": false}\n'
    '{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [5, 7], "validate": false}\n'
    '{"step": 1, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [2, 2], "validate": false}\n'
    '{"step": 1, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [4, 8], "validate": false}\n'
)


def tiny_run(tmp_path, *others):
    """A database holding the PACKED run (and any other trace files): its path and the run ids."""
    from polytrace.ingest.load import ingest_paths

    src = tmp_path / "packed_lengths_step_0.jsonl"
    src.write_text(PACKED)
    db = tmp_path / "p.duckdb"
    con = store.open(db)
    try:
        return db, [ingest_paths(con, [path], name="tiny" if path == src else path.stem).run_id
                    for path in (src, *others)]
    finally:
        con.close()


def test_downsample_buckets_steps_per_series():
    # Steps 0..9 on two ranks, v = 10 * step + rank. max_points=4 -> width ceil(10/4) = 3:
    # buckets start at steps 0, 3, 6, 9. Rank 0's first bucket averages v 0, 10, 20 -> 10;
    # rank 1's last bucket holds only step 9 -> 91.
    columns = ["step", "dp_rank", "v", "label"]
    rows = [[s, r, 10 * s + r, f"s{s}"] for s in range(10) for r in (0, 1)]
    out, note = downsample(columns, rows, {"kind": "line", "x": "step", "y": ["v"], "color": "dp_rank"}, 4)
    assert note == {"steps": 10, "points": 4, "width": 3}
    got = {(r[0], r[1]): r[2] for r in out}
    assert got == {(0, 0): 10.0, (0, 1): 11.0, (3, 0): 40.0, (3, 1): 41.0,
                   (6, 0): 70.0, (6, 1): 71.0, (9, 0): 90.0, (9, 1): 91.0}
    assert {r[3] for r in out if r[0] == 3} == {"s3"}  # text keeps the bucket's first value


def test_downsample_leaves_short_runs_and_non_step_charts_alone():
    rows = [[s, float(s)] for s in range(50)]
    assert downsample(["step", "v"], rows, {"kind": "line", "x": "step", "y": ["v"]}, 600) == (rows, None)
    hist = [[s, 1] for s in range(1000)]
    assert downsample(["bin", "n"], hist, {"kind": "hist", "x": "bin", "y": ["n"]}, 10) == (hist, None)
    # Floats on x (a timeline's microseconds) are not steps: never bucketed here.
    us = [[s + 0.5, 1] for s in range(1000)]
    assert downsample(["t", "d"], us, {"kind": "line", "x": "t", "y": ["d"]}, 10)[1] is None


def test_downsample_heatmap_keeps_each_lane():
    # 700 steps x 2 lanes; heatmaps get at most 300 columns -> width ceil(700/300) = 3,
    # ceil(700/3) = 234 columns, each lane kept apart.
    rows = [[s, lane, lane] for s in range(700) for lane in (0, 1)]
    out, note = downsample(["step", "rank", "z"], rows,
                           {"kind": "heatmap", "x": "step", "y": ["rank"], "z": "z"}, 600)
    assert note == {"steps": 700, "points": 234, "width": 3}
    assert len(out) == 2 * 234 and {r[2] for r in out if r[1] == 1} == {1.0}


def test_number_formats_follow_the_fmt_tag():
    assert fmt("pct", 0.4123) == "41%"
    assert fmt("pct", 0.038) == "3.8%"
    assert fmt("pct100", 41.23) == "41%"
    assert fmt("x", 12.04) == "12.0×"
    assert fmt("x", 1.3) == "1.30×"
    assert fmt("count", 12) == "12"
    assert fmt("count", 30720) == "30,720"
    assert fmt("tokens", 1234.5) == "1,234"
    assert fmt("s", 3.25) == "3.2 s"
    assert fmt("s", 1234.5) == "1,234 s"
    # durations in readable units: never 52,000,000 microseconds
    assert fmt("us", 52e6) == "52.0 s"
    assert fmt("us", 250.0) == "250 µs"
    assert fmt("ms", 12.5) == "12.5 ms"
    assert fmt("gpu_h", 2.1217) == "2.12 GPU-hours"
    assert fmt("gpu_h", 1234.5) == "1,234 GPU-hours"
    assert fmt("bytes", 1_500_000) == "1.5 MB"
    assert fmt(None, 0.123456) == "0.123"
    assert fmt("pct", None) == "n/a"
    assert fmt("pct", float("nan")) == "nan"


def column(name: str, description: str, kind: str | None = None) -> Column:
    return Column(name, "DOUBLE", description, kind)


def test_findings_follow_column_templates():
    columns = {c.name: c for c in (
        column("idle_frac", "Idle share. Sentence: Engines sat idle {idle_frac} (worst step {worst}).",
               "pct"),
        column("worst", "Worst step.", "count"),
        column("hit", "Cache. Sentence: The cache served {hit}.", "pct"),
        column("n", "Rows.", "count"))}
    row = {"idle_frac": 0.25, "worst": 7, "hit": None, "n": 3}
    (sentence,) = findings(row, columns)
    assert "".join(p.get("text") or p["shown"] for p in sentence) == \
        "Engines sat idle 25% (worst step 7)."
    # A missing number inside parentheses drops only the aside.
    (sentence,) = findings({**row, "worst": None}, columns)
    assert "".join(p.get("text") or p["shown"] for p in sentence) == "Engines sat idle 25%."
    # Without any template each known column reads as '<description>: <value>.'
    plain = findings({"n": 3000, "run_id": "x"}, {"n": column("n", "Rows in the run.", "count")})
    assert plain == [[{"text": "Rows in the run: "}, {"col": "n", "value": 3000, "shown": "3,000"},
                      {"text": "."}]]


def test_every_run_summary_number_reads_by_its_tag():
    """The headline sentences name only tagged columns, so none falls back to a bare number."""
    from polytrace.queries.catalog import get_query
    from polytrace.server.headlines import _placeholders, _sentence_template

    columns = {c.name: c for c in get_query("run_summary").columns}
    named = {n for c in columns.values() for n in _placeholders(_sentence_template(c.description) or "")}
    assert named and all(columns[n].fmt for n in named if columns[n].numeric)
    assert columns["mean_step_s"].fmt == "s" and columns["whatif_best_gpu_hours"].fmt == "gpu_h"


def test_pages_pick_queries_from_the_catalog_alone():
    names = {q.name for q in run_chart_queries()}
    assert {"length_stats", "length_histogram"} <= names
    # Needs a key with no default, or two runs: not drawn on the run page.
    assert "metric" not in names and "fidelity" not in names and "runs" not in names
    assert all(q.chart and q.section not in ("Runs",) for q in run_chart_queries())
    two = {q.name for q in compare_queries()}
    assert "fidelity" in two and not two & names
    # The sections come from the catalog, in its order; the run page leaves out Runs.
    assert RUN_SECTIONS == tuple(s for s in SECTIONS if s not in ("Runs", "Findings"))
    assert {q.section for q in run_chart_queries()} <= set(RUN_SECTIONS)


def test_page_routes(tmp_path, make_server):
    db, (run_id,) = tiny_run(tmp_path)
    srv = make_server(db=str(db))
    page = httpx.get(f"{srv.url}/runs/{run_id}")
    assert page.status_code == 200 and 'data-query="length_stats"' in page.text
    assert 'data-section="Multi-turn"' not in page.text  # no turns: section hidden
    missing = httpx.get(f"{srv.url}/runs/nope")
    assert missing.status_code == 404 and "There is no run &#39;nope&#39;" in missing.text
    assert httpx.get(f"{srv.url}/queries/nope").status_code == 404
    # The charts read the REST rows, cut to the x window by its display parameters.
    full = httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id}).json()
    assert set(full) == {"ok", "columns", "rows", "truncated"}  # no display parameter: no extra keys
    window = httpx.get(f"{srv.url}/api/queries/length_stats",
                       params={"run_id": run_id, "_x_from": 1, "_x_to": 1, "_points": 600}).json()
    assert window["rows"] == [r for r in full["rows"] if r[0] == 1]
    assert window["x_bounds"] == [0, 1] and window["downsampled"] is None
    # Step 1: lengths 2, 2, 4, 8 -> p50 3, max 8.
    stats = dict(zip(window["columns"], window["rows"][0]))
    assert stats["response_p50"] == 3.0 and stats["response_max"] == 8
    bad = httpx.get(f"{srv.url}/api/queries/length_stats", params={"run_id": run_id, "_points": "x"})
    assert bad.status_code == 422 and bad.json() == {
        "ok": False, "error": "parameter '_points': Input should be a valid integer, unable to parse "
                              "string as an integer", "status": 422}
    assert httpx.get(f"{srv.url}/ui/chart/length_stats").status_code == 404  # one data route
    # The catalog page groups queries under the catalog's sections, in its order.
    shown = re.findall(r'<section class="section" data-section="([^"]+)"', httpx.get(f"{srv.url}/queries").text)
    assert shown[0] == "Runs" and shown == [s for s in SECTIONS if s in shown] and "Rollout tail" in shown
    # A query page shows the file's own SQL, the views it reads and each column's fmt.
    tail = httpx.get(f"{srv.url}/queries/rollout_tail").text
    assert "FROM rollout_engines\nORDER BY step, dp_rank" in tail and "rollout_steps AS (" not in tail
    assert "<code>rollout_steps</code>, <code>rollout_engines</code>" in tail
    assert "<td><code>idle_frac</code></td><td>double</td><td><code>pct</code></td>" in tail
    assert httpx.get(f"{srv.url}/static/plotly.min.js").headers["content-type"].startswith(
        "application/javascript")


def _summary_sentences(case: str) -> list[str]:
    """run_summary of a golden case's run r1, as the run page words it."""
    from polytrace.queries.catalog import bind, get_query
    from polytrace.queries.runner import run_bound
    from tests.goldens import load_case

    query = get_query("run_summary")
    con = load_case(case)
    try:
        result = run_bound(con, query, bind(query, {"run_id": "r1"}))
    finally:
        con.close()
    row = dict(zip(result.columns, result.rows[0]))
    columns = {c.name: c for c in query.columns}
    return ["".join(p.get("text") or p["shown"] for p in s) for s in findings(row, columns)]


def test_kineto_only_and_verl_only_runs_get_headlines():
    # tests/fixtures/golden/README.md derives these numbers: kineto ranks idle 0.4 and 0.1,
    # compute 0.5 each; verl_log gen 9 of 20 s, steps 10 s, slowest shares 0.75 and 0.5,
    # clip ratios 0.1 and 0.3, global_seqlen 120/100 and 100/100.
    assert _summary_sentences("kineto") == [
        "GPUs sat idle 25% of their profiled time on average (worst: rank 0, 40%).",
        "Compute kernels ran 50% of the profiled GPU time; the rest went to communication, "
        "memory copies and idling."]
    assert _summary_sentences("verl_log") == [
        "20% of responses hit the length cap and were cut short.",  # cap unknown: aside dropped
        "The busiest DP rank carried 1.20× the mean rank's tokens in step 1, 1.10× on average.",
        "Rollout generation took 45% of step time (a step took 10.0 s on average).",
        "The slowest generation alone took 62% of the gen stage on average: the rollout waits "
        "on its long tail."]
    packed = _summary_sentences("packed")
    assert packed[0] == ("Rollout engines sat idle 44% of each rollout on average waiting for the "
                         "slowest engine, 50% in the worst one (step 1).")
    assert "21% of responses hit the length cap (16 tokens) and were cut short." in packed
    # From the stored simulation: round-robin saves 3 s x 8 GPUs = 0.0067 GPU-hours.
    assert packed[-1] == ("Dispatching by round-robin would save 0.00667 GPU-hours over the run, "
                          "10% of rollout time on 8 GPUs (the length-balanced oracle bound: 0.02 GPU-hours).")


def test_run_page_offers_a_simulation_until_there_is_one(tmp_path, make_server):
    from polytrace.workload.whatif import simulate_and_store

    log = tmp_path / "output.log"
    log.write_text("step:1 - timing_s/gen:6.0 - timing_s/step:10.0\n")
    db, (run_id, verl_id) = tiny_run(tmp_path, log)
    srv = make_server(db=str(db))
    page = httpx.get(f"{srv.url}/runs/{run_id}").text
    assert 'id="whatif-run"' in page and f'data-url="/api/runs/{run_id}/whatif"' in page
    assert 'data-query="whatif"' not in page
    # The rollout bars draw from the generic renderer's grouped, shaded stacked kind.
    assert 'data-query="rollout_busy" data-kind="stacked"' in page
    # No per-rank samples, nothing to simulate: no button.
    assert 'id="whatif-run"' not in httpx.get(f"{srv.url}/runs/{verl_id}").text
    srv.app.state.db.write(lambda cur: simulate_and_store(cur, run_id))
    page = httpx.get(f"{srv.url}/runs/{run_id}").text
    assert 'id="whatif-run"' not in page
    assert 'data-query="whatif"' in page and 'data-query="whatif_savings"' in page

"""Dashboard logic without a browser: server-side downsampling, number wording, page routes."""
from __future__ import annotations

import html
import json
import re

import httpx

from polytrace import store
from polytrace.ingest.registry import FORMATS
from polytrace.queries.catalog import SECTIONS, get_query
from polytrace.queries.display import buckets, downsample, for_chart
from polytrace.server.headlines import difference, fmt, ratio, step_span
from polytrace.server.routers.pages import (
    RUN_SECTIONS,
    _label,
    caption,
    chart_info,
    compare_queries,
    run_chart_queries,
    table_cell,
)

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
    assert note == {"steps": 10, "points": 4, "width": 3, "last_bucket_steps": 1}
    got = {(r[0], r[1]): r[2] for r in out}
    assert got == {(0, 0): 10.0, (0, 1): 11.0, (3, 0): 40.0, (3, 1): 41.0,
                   (6, 0): 70.0, (6, 1): 71.0, (9, 0): 90.0, (9, 1): 91.0}
    assert {r[3] for r in out if r[0] == 3} == {"s3"}  # text keeps the bucket's first value


def test_buckets_from_a_step_count_the_steps_of_the_last():
    # What a live page asks (_since=6&_width=4): steps 6..11 and 13 (12 missing) of one series,
    # v = step. Buckets [6, 9], [10, 13]: means 7.5 and (10 + 11 + 13) / 3 = 34 / 3; the last
    # holds 3 steps. A step before the origin is not there to bucket (the SQL began at 6).
    columns = ["step", "v"]
    rows = [[s, float(s)] for s in (6, 7, 8, 9, 10, 11, 13)]
    out, note = buckets(columns, rows, {"kind": "line", "x": "step", "y": ["v"]}, 6, 4)
    assert out == [[6, 7.5], [10, 34 / 3]]
    assert note == {"steps": 7, "points": 2, "width": 4, "last_bucket_steps": 3}
    # for_chart: the rows from `since` (a kept answer holds all of them), then the buckets
    shaped = for_chart(columns, [[s, float(s)] for s in range(14) if s != 12], {"kind": "line", "x": "step"},
                       600, None, None, since=6, width=4)
    assert shaped == {"rows": out, "downsampled": note, "x_bounds": [6, 13]}


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
    assert note == {"steps": 700, "points": 234, "width": 3, "last_bucket_steps": 1}
    assert len(out) == 2 * 234 and {r[2] for r in out if r[1] == 1} == {1.0}


def test_number_formats_follow_the_fmt_tag():
    assert fmt("pct", 0.4123) == "41%"
    assert fmt("pct", 0.038) == "3.8%"
    assert fmt("pct", 0.0002) == "0.02%"  # a share that is not 0 never reads 0.0%
    assert fmt("pct100", 41.23) == "41%"
    assert fmt("x", 12.04) == "12.0×"
    assert fmt("x", 1.3) == "1.30×"
    assert fmt("count", 12) == "12"
    assert fmt("count", 30720) == "30,720"
    assert fmt("tokens", 1234.5) == "1,234"
    assert fmt("s", 3.25) == "3.2 s"
    assert fmt("s", 1234.5) == "21 min"  # the unit the charts use too (tests/fixtures/fmt_vectors.json)
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
    # never in exponent notation, rounded before the unit is chosen
    assert fmt(None, 999.5) == "1,000"
    assert fmt(None, -1.13e-06) == "-0.00000113"
    assert fmt("gpu_h", 7.66e-06) == "0.00000766 GPU-hours"
    assert fmt("pct100", 4e-05) == "0.00004%"
    assert fmt("s", 0.9996) == "1.0 s"
    assert fmt("s", 0.0009996) == "1 ms"
    assert fmt("x", 9.999) == "10.0×"
    assert ratio(1, 1234.5) == "B is 1,230× A"


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
    # the GPU window is a rank and a step, each a number: anything else is refused in one line
    bad = httpx.get(f"{srv.url}/runs/{run_id}", params={"rank": "x"})
    assert bad.status_code == 422 and bad.json()["error"].startswith("parameter 'rank':")
    # a run without GPU traces has no window to choose
    assert "gpu-window" not in httpx.get(f"{srv.url}/runs/{run_id}", params={"rank": 0, "step": 1}).text
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
        "ok": False, "error": "parameter '_points' must be an integer, got 'x'", "status": 422}
    reversed_window = httpx.get(f"{srv.url}/api/queries/length_stats",
                                params={"run_id": run_id, "_x_from": 5, "_x_to": 1})
    assert reversed_window.status_code == 422 and reversed_window.json()["error"] == (
        "the step window is reversed: _x_from 5 is after _x_to 1")
    # a histogram's x is bucket labels: a step window over it is a 422 that says so, not a 500
    labels = httpx.get(f"{srv.url}/api/queries/length_histogram", params={"run_id": run_id, "_x_from": 0})
    assert labels.status_code == 422 and labels.json()["error"].startswith("length_histogram: its x axis (")
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
    # No per-rank samples, and one timed step is too few to fit: no button.
    assert 'id="whatif-run"' not in httpx.get(f"{srv.url}/runs/{verl_id}").text
    srv.app.state.db.write(lambda cur: simulate_and_store(cur, run_id))
    page = httpx.get(f"{srv.url}/runs/{run_id}").text
    assert 'id="whatif-run"' not in page
    assert 'data-query="whatif"' in page and 'data-query="whatif_savings"' in page


def test_b_against_a_in_words():
    # Shares differ in percentage points, durations in readable units, the rest as they read.
    assert difference("pct", 0.23, 0.35) == "+12 pp"
    assert difference("pct", 0.0002, 0.0017) == "+0.1 pp"
    assert difference("pct100", 50.0, 38.0) == "\u221212 pp"
    assert difference("s", 46.0, 342.0) == "+296 s"
    assert difference("us", 52e6, 51e6) == "\u22121.0 s"
    assert difference("count", 4608, 5120) == "+512"
    assert difference("x", 1.09, 1.07) == "\u22120.02×"
    assert difference("pct", 0.5, 0.5) == "same"
    assert difference("pct", None, 0.5) == ""
    # B over A as a multiple; nothing when A is 0 or the sign flips.
    assert ratio(100, 180) == "B is 1.8× A"
    assert ratio(46.0, 342.0) == "B is 7.43× A"
    assert ratio(3, 3) == "B equals A"
    assert ratio(0, 5) == "" and ratio(-1, 2) == "" and ratio("a", 2) == ""


def test_labels_and_captions_come_from_the_catalog_text():
    # A run_summary column reads as the clause of its sentence that holds its number...
    gen = ("sum(timing_s/gen) / sum(timing_s/step). Sentence: Rollout generation took {gen_share} of "
           "step time (a step took {mean_step_s} on average).")
    assert _label(gen, "gen_share") == "Rollout generation took … of step time"
    dp = ("Largest imbalance. Sentence: The busiest DP rank carried {dp_max} the mean rank's tokens in "
          "step {straggler_step}, {dp_mean} on average.")
    assert _label(dp, "dp_max") == "The busiest DP rank carried … the mean rank's tokens"
    # ...else as its description, up to its first qualification.
    assert _label("Largest idle share of any rank; NULL with a single rank.", "worst") == \
        "Largest idle share of any rank"
    assert _label(None, "gpu_idle_rank") == "gpu idle rank"
    # A chart's caption is its query's first sentence; the whole text sits behind "details".
    assert caption("Per step, X. A high tail_ratio (e.g. 20) means Y.") == \
        ("Per step, X.", "Per step, X. A high tail_ratio (e.g. 20) means Y.")
    assert caption("One sentence only.") == ("One sentence only.", "")


def test_a_findings_steps_in_words():
    assert step_span([2], bridge=True) == "step 2"
    assert step_span([1, 10], bridge=True) == "steps 1 and 10"
    # A log's cut-short lines leave single steps out of a collapse: still one stretch.
    assert step_span([*range(12, 20), *range(21, 30)], bridge=True) == "steps 12–29"
    assert step_span([*range(12, 20), *range(21, 30)]) == "steps 12–19 and 21–29"
    assert step_span([*range(1, 26), *range(236, 262)], bridge=True) == "steps 1–25 and 236–261"
    assert step_span([10, 20, 30, 40, 50], bridge=True) == "5 steps from 10 to 50"
    assert step_span([], bridge=True) == "" and step_span(None) == ""


def test_table_cells_read_by_fmt_with_all_for_whole_trace_rows():
    assert table_cell(None, "step", "count") == {"text": "all", "n": True, "full": None}
    assert table_cell(None, "rank", "count")["text"] == ""
    assert table_cell(52e6, "dur_us", "us") == {"text": "52.0 s", "n": True, "full": None}
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    assert table_cell(name, "name", None) == {"text": name, "n": False, "full": name}


def test_axis_titles_of_a_chars_run_say_chars():
    stats = chart_info(get_query("length_stats"), {"run_id": "r"}, "chars")
    assert stats["chart"]["ylabel"] == "response length (chars)"
    assert stats["columns"]["response_p50"]["description"] == "Median response length (chars)."
    hist = chart_info(get_query("length_histogram"), {"run_id": "r"}, "chars")
    assert hist["chart"]["xlabel"] == "response length (chars, log2 bins)"
    # The catalog itself is untouched, and a tokens run reads tokens.
    assert get_query("length_stats").chart["ylabel"] == "response length (tokens)"
    assert chart_info(get_query("length_stats"), {"run_id": "r"})["chart"]["ylabel"] == "response length (tokens)"


# A verl log whose mean response length falls from hundreds of tokens to 1 at step 5.
COLLAPSE = "".join(
    f"step:{i} - response_length/mean:{m} - response_length/max:{2 * m} - timing_s/gen:6.0 - timing_s/step:10.0\n"
    for i, m in enumerate([120, 300, 400, 350, 1, 1, 1, 1, 1, 1], 1))


def _finding_items(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<li class="finding sev-\w+" data-kind="(\w+)" data-severity="(\w+)">', html)


def test_run_page_says_what_the_findings_say(tmp_path, make_server):
    log = tmp_path / "collapse.output.log"
    log.write_text(COLLAPSE)
    quiet = tmp_path / "quiet.output.log"
    quiet.write_text("step:1 - timing_s/gen:6.0 - timing_s/step:10.0\n")
    db, (_, run_id, quiet_id) = tiny_run(tmp_path, log, quiet)
    srv = make_server(db=str(db))
    found = httpx.get(f"{srv.url}/api/runs/{run_id}/findings").json()["findings"]
    assert [f["kind"] for f in found] == ["collapse", "length_drift"]
    page = httpx.get(f"{srv.url}/runs/{run_id}").text
    # The same list as the API, most severe first, each sentence as the API words it.
    assert _finding_items(page) == [(f["kind"], f["severity"]) for f in found]
    for f in found:
        assert html.escape(f["text"], quote=False) in page
    assert '<span class="badge sev-critical">critical</span>' in page
    # The evidence is the proving query's page over the same parameters, named by its title.
    assert (f'<a class="evidence" href="/queries/metric?run_id={run_id}&amp;key=response_length/mean" '
            f'data-api="/api/queries/metric?run_id={run_id}&amp;key=response_length/mean">One metric over steps</a>'
            ) in page
    assert 'data-from="5" data-to="10"' in page and ">steps 5–10</button>" in page
    # The charts get each finding's steps to mark.
    marks = json.loads(re.search(r'id="marks-json">(.*?)</script>', page).group(1))
    assert marks == {run_id: [{k: f[k] for k in ("kind", "severity", "steps")} for f in found]}
    assert "Headline findings" not in page
    # A run with nothing to report says so, in one line.
    quiet_page = httpx.get(f"{srv.url}/runs/{quiet_id}").text
    assert _finding_items(quiet_page) == []
    assert '<p class="empty nothing-unusual">Nothing unusual in these numbers.</p>' in quiet_page


def test_a_run_measured_in_chars_says_so(tmp_path, make_server):
    db, (run_id,) = tiny_run(tmp_path)
    con = store.open(db)
    try:
        # runs.length_unit is optional: a database without the column reads tokens.
        con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS length_unit VARCHAR")
        con.execute("UPDATE runs SET length_unit = 'chars'")
    finally:
        con.close()
    srv = make_server(db=str(db))
    page = httpx.get(f"{srv.url}/runs/{run_id}").text
    assert "lengths in characters" in page
    charts = json.loads(re.search(r'id="charts-json">(.*?)</script>', page).group(1))
    stats = next(c for c in charts if c["name"] == "length_stats")
    assert stats["chart"]["ylabel"] == "response length (chars)"
    assert not any("(tokens" in (c["chart"].get("ylabel") or "") + (c["chart"].get("xlabel") or "")
                   for c in charts)


def test_compare_page_words_b_against_a_and_shows_fidelity_on_request(tmp_path, make_server):
    a_log, b_log = tmp_path / "a.output.log", tmp_path / "b.output.log"
    a_log.write_text("".join(f"step:{i} - timing_s/gen:6.0 - timing_s/step:10.0\n" for i in (1, 2)))
    b_log.write_text("".join(f"step:{i} - timing_s/gen:9.0 - timing_s/step:20.0\n" for i in (1, 2)))
    db, (_, a, b) = tiny_run(tmp_path, a_log, b_log)
    srv = make_server(db=str(db))
    page = httpx.get(f"{srv.url}/compare", params={"a": a, "b": b}).text
    # gen share 60% against 45%; a step 10 s against 20 s.
    row = re.search(r'<tr data-col="gen_share">(.*?)</tr>', page).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row) == [
        "Rollout generation took … of step time", "60%", "45%", "\u221215 pp", "B is 0.75× A"]
    row = re.search(r'<tr data-col="mean_step_s">(.*?)</tr>', page).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row)[1:] == ["10.0 s", "20.0 s", "+10.0 s", "B is 2× A"]
    # Both runs' findings side by side.
    assert 'id="findings-a"' in page and 'id="findings-b"' in page
    # The replay fidelity reads A as a replay of B: only when asked for.
    assert 'data-query="fidelity"' not in page and "Show the replay fidelity" in page
    asked = httpx.get(f"{srv.url}/compare", params={"a": a, "b": b, "fidelity": 1}).text
    assert 'data-query="fidelity"' in asked
    assert "is read as the replay (the benchmark run)" in asked and "as the formal run it replays" in asked


def test_runs_page_offers_the_upload_fields_the_api_takes(make_server):
    page = httpx.get(make_server().url + "/").text
    options = re.findall(r'<option value="([^"]*)"', re.search(r'<select id="format".*?</select>', page, re.S).group(0))
    assert options == ["", *(f.name for f in FORMATS)]
    assert 'id="max-response-len"' in page and 'id="gpus"' in page and 'id="folder-input" webkitdirectory' in page
    assert '<a href="/docs">API docs</a>' in page

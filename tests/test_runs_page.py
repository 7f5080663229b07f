"""The runs page as the runs overview, in headless Chromium against a real server: the table
against GET /api/queries/runs_overview (order, figures by fmt, paging), sorting and filtering with
the state in the URL, the cross-run chart, selection for compare, and a run that arrives while
the page is open."""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from polytrace.queries import answers, overview
from polytrace.queries.catalog import digest, get_query
from polytrace.queries.runner import run as run_query
from tests.goldens import load_case
from tests.test_browser import browser, console_errors, open_page, page, screenshot  # noqa: F401

pytestmark = pytest.mark.browser

PAGE_SIZE = 100  # rows per page (frontend/static/runs.js)
FILLERS = 142    # with the eight golden runs: 150, two pages
MODELS = ("Qwen3-8B", "Llama-3.1-8B-Instruct", "Mistral-7B-v0.3")
TASKS = ("math", "code", "agent")
FRAMEWORKS = ("verl", "rllm", "openrlhf")
CAPS = (4096, 8192, 16384, 32768, None)
FIGURES = ("findings_critical", "findings_warn", "steps", "samples", "gpus", "max_response_len",
           "step_s_mean", "rollout_idle_frac_mean", "tail_ratio_max", "dp_imbalance_mean",
           "filter_waste_share", "gpu_idle_pct")
SEARCHED = ("name", "model", "task", "framework")


def filler(i: int) -> tuple[dict, dict]:
    """Run i's runs row and its overview line: figures spread so that a numeric order differs
    from a text one (9 < 10 < 100), with gaps (NULL) to sort last."""
    run = {"run_id": f"f{i:03d}", "name": f"{TASKS[i % 3]} run {i}", "format": "polytrace-packed",
           "framework": FRAMEWORKS[(i // 3) % 3], "model": MODELS[(i // 9) % 3], "task": TASKS[i % 3],
           "max_response_len": CAPS[i % 5], "created_at": datetime(2026, 1, 1) + timedelta(minutes=i)}
    line = {"run_id": run["run_id"], "steps": 1 + (i * 7) % 120, "samples": (i * 37) % 1000 * 8,
            "gpus": (8, 16, 64, 128)[i % 4], "step_s_mean": None if i % 6 == 0 else 5 + (i * 13) % 200 / 3,
            "rollout_idle_frac_mean": None if i % 10 == 0 else (i * 29) % 97 / 100,
            "tail_ratio_max": 1 + (i % 17) / 4, "dp_imbalance_mean": 1 + (i % 5) / 10,
            "filter_waste_share": (i % 7) / 10 if i % 2 else None,
            "gpu_idle_pct": (i * 3) % 100 if i % 4 == 1 else None,
            "findings_critical": int(i % 11 == 0), "findings_warn": i % 3, "findings_info": 0}
    return run, line


def build_db(path: Path) -> None:
    """The golden findings runs with their computed lines, and the fillers' lines (their findings
    list the empty one) and the answers a current catalog keeps, so that nothing is stale. A filler has no sample or step rows: but for
    its run_summary, its answers are those of any run without them (its line's counts are made
    up: the page shows the line)."""
    con = load_case("findings", str(path))
    try:
        overview.refresh(con, [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()])
        empty = [(q.name, run_query(con, q, {"run_id": "no such run"}))
                 for q in answers.stored_queries() if q.name != "run_summary"]
        for run, line in map(filler, range(FILLERS)):
            line = {**line, "findings": "[]", "catalog": digest(), "refreshed_at": datetime(2026, 1, 2)}
            for table, values in (("runs", run), ("run_overview", line)):
                names, marks = ", ".join(values), ", ".join("?" * len(values))
                con.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(values.values()))
            summary = run_query(con, get_query("run_summary"), {"run_id": run["run_id"]})
            answers.keep(con, [run["run_id"]], [(run["run_id"], "run_summary", summary),
                                                *((run["run_id"], name, a) for name, a in empty)])
        assert overview.stale(con) == []
    finally:
        con.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):  # noqa: F811
    from polytrace.settings import Settings
    from tests.conftest import LiveServer

    db = tmp_path_factory.mktemp("runs-page") / "runs.duckdb"
    build_db(db)
    srv = LiveServer(Settings(db=str(db))).__enter__()
    yield srv
    srv.__exit__(None, None, None)


def overview_rows(srv) -> list[dict]:
    body = httpx.get(f"{srv.url}/api/queries/runs_overview", timeout=30).json()
    assert body["ok"], body
    return [dict(zip(body["columns"], r)) for r in body["rows"]]


def shown_ids(pg) -> list[str]:
    return pg.locator("#runs tbody tr").evaluate_all("trs => trs.map(t => t.dataset.runId)")


def url_state(pg) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(pg.url).query).items()}


def ordered(rows: list[dict], col: str, descending: bool) -> list[str]:
    """The page's order: by the column, gaps last either way, ties in the overview's order."""
    def key(r):
        v = r[col]
        return (v is None, 0 if v is None else -v if descending else v)
    return [r["run_id"] for r in sorted(rows, key=key)]


def wait_rows(pg, ids: list[str]) -> None:
    """Until the table shows these runs, in this order."""
    pg.wait_for_function("""ids => JSON.stringify([...document.querySelectorAll('#runs tbody tr')]
        .map(t => t.dataset.runId)) === JSON.stringify(ids)""", arg=ids)


def wait_points(pg, ids: set[str]) -> None:
    """Until the cross-run chart has a marker for each of these runs and no other."""
    pg.wait_for_function("""ids => { const el = document.getElementById('chart-across');
        const got = el.data ? el.data.flatMap(t => t.ids || []) : [];
        return got.length === ids.length && ids.every(i => got.includes(i)); }""", arg=sorted(ids))


def chart(pg) -> dict:
    """The cross-run chart as drawn: its markers (run id, x, y) and axis titles."""
    return pg.evaluate("""() => {
        const el = document.getElementById('chart-across');
        if (!el.data) return {points: [], text: el.textContent};
        const points = el.data.flatMap(t => t.ids.map((id, i) => [id, t.x[i], t.y[i], t.name]));
        return {points, x: el.layout.xaxis.title.text, y: el.layout.yaxis.title.text};
    }""")


def test_the_table_is_the_overview_worst_first(page, server):  # noqa: F811
    rows = overview_rows(server)
    assert len(rows) == 8 + FILLERS
    open_page(page, server.url + "/")
    assert page.get_attribute("#runs", "data-loaded") == str(len(rows))
    assert page.inner_text("#runs-count") == f"{len(rows)} runs"
    # the first page in the overview's own order: the worst problems first
    assert shown_ids(page) == [r["run_id"] for r in rows[:PAGE_SIZE]]
    assert page.inner_text("#page-label") == f"1–{PAGE_SIZE} of {len(rows)}"
    headers = page.locator("#runs thead th").all_inner_texts()
    assert headers[1:6] == ["Run", "Critical", "Warnings", "Steps", "Samples"]
    # a golden run's line: figures in their fmt's units, counts as badges, a link to its page
    r4 = next(r for r in rows if r["run_id"] == "r4")
    cells = dict(zip(headers, page.locator("#runs tr[data-run-id='r4'] td").all_inner_texts()))
    assert cells["Run"].startswith("packed, cap inferred") and "r4" in cells["Run"]
    assert (cells["Critical"], cells["Warnings"], cells["Samples"], cells["GPUs"]) == ("1", "2", "8", "8")
    assert (cells["Rollout idle"], cells["Tail ratio"], cells["DP imbalance"], cells["Filter waste"]) == \
        ("40%", "3.33×", "1.47×", "17%")
    assert r4["rollout_idle_frac_mean"] == 0.4 and cells["Step time"] == "" and cells["Cap"] == ""
    assert page.locator("#runs tr[data-run-id='r4'] .count-critical").count() == 1
    assert dict(zip(headers, page.locator("#runs tr[data-run-id='r1'] td").all_inner_texts()))["GPUs"] == ""
    page.fill("#runs-filter", "kineto")  # r6 is on the second page
    wait_rows(page, ["r6"])
    r6 = page.locator("#runs tr[data-run-id='r6'] td").all_inner_texts()
    assert dict(zip(headers, r6))["GPU idle"] == "30%"
    page.click("#runs tr[data-run-id='r6'] td.run a")
    page.wait_for_url("**/runs/r6")
    assert console_errors(page) == []


def test_every_figure_sorts_as_numbers_and_the_url_keeps_it(page, server):  # noqa: F811
    rows = overview_rows(server)
    open_page(page, server.url + "/")
    for col in FIGURES:
        header = page.locator(f"#runs th[data-col='{col}']")
        header.locator("button").click()  # a figure: largest first
        assert header.get_attribute("aria-sort") == "descending"
        assert url_state(page).get("sort") == f"-{col}"
        assert shown_ids(page) == ordered(rows, col, True)[:PAGE_SIZE], col
        header.locator("button").click()  # again: turned round, gaps still last
        assert header.get_attribute("aria-sort") == "ascending"
        assert url_state(page).get("sort") == col
        assert shown_ids(page) == ordered(rows, col, False)[:PAGE_SIZE], col
    page.click("#page-next")
    assert url_state(page) == {"sort": "gpu_idle_pct", "page": "2"}
    assert shown_ids(page) == ordered(rows, "gpu_idle_pct", False)[PAGE_SIZE:]
    page.click("#worst-first")
    assert url_state(page) == {} and shown_ids(page) == [r["run_id"] for r in rows[:PAGE_SIZE]]
    assert page.locator("#runs th[aria-sort]").count() == 0
    assert console_errors(page) == []


def test_the_filter_reads_name_model_task_and_framework(page, server):  # noqa: F811
    rows = overview_rows(server)
    open_page(page, server.url + "/")

    def matching(*terms: str) -> list[str]:
        return [r["run_id"] for r in rows
                if all(any(t in (r[c] or "").lower() for c in SEARCHED) for t in terms)]

    for text in ("llama", "openrlhf", "agent", "CODE run", "mistral verl", "cap given"):
        page.fill("#runs-filter", text)
        expected = matching(*text.lower().split())
        assert expected, text
        wait_rows(page, expected[:PAGE_SIZE])
        assert page.inner_text("#runs-count") == f"{len(expected)} of {len(rows)} runs"
        assert url_state(page).get("q") == text
        # the chart shows the runs the filter keeps that have both figures
        with_both = {r["run_id"] for r in rows if r["run_id"] in expected
                     and r["max_response_len"] is not None and r["rollout_idle_frac_mean"] is not None}
        wait_points(page, with_both)
    page.fill("#runs-filter", "no such run")
    page.wait_for_selector("#no-match:not([hidden])")
    assert shown_ids(page) == [] and page.locator("#pager").is_hidden()
    page.fill("#runs-filter", "")
    page.wait_for_function("() => document.getElementById('runs-count').textContent === '150 runs'")
    assert "q" not in url_state(page)
    assert console_errors(page) == []


def test_the_url_restores_sort_filter_page_and_axes(page, server):  # noqa: F811
    rows = overview_rows(server)
    query = "?q=run&sort=-tail_ratio_max&page=2&x=steps&y=dp_imbalance_mean"
    open_page(page, server.url + "/" + query)
    runs = [r for r in rows if "run" in r["name"].lower()]
    assert page.input_value("#runs-filter") == "run"
    assert page.get_attribute("#runs th[data-col='tail_ratio_max']", "aria-sort") == "descending"
    assert shown_ids(page) == ordered(runs, "tail_ratio_max", True)[PAGE_SIZE:]
    assert (page.input_value("#across-x"), page.input_value("#across-y")) == ("steps", "dp_imbalance_mean")
    drawn = chart(page)
    assert {p[0]: (p[1], p[2]) for p in drawn["points"]} == \
        {r["run_id"]: (r["steps"], pytest.approx(r["dp_imbalance_mean"])) for r in runs}
    page.reload()
    open_page(page, page.url)
    assert urlsplit(page.url).query == query[1:]
    # nonsense in the URL falls back to the defaults
    open_page(page, server.url + "/?sort=-nope&page=99&x=name&y=")
    assert page.locator("#runs th[aria-sort]").count() == 0
    assert (page.input_value("#across-x"), page.input_value("#across-y")) == \
        ("max_response_len", "rollout_idle_frac_mean")
    assert page.inner_text("#page-label") == f"{PAGE_SIZE + 1}–{len(rows)} of {len(rows)}"  # the last page
    assert url_state(page) == {"page": "2"}  # what the page shows, said canonically
    assert console_errors(page) == []


def test_the_cross_run_chart_plots_any_figure_against_another(page, server):  # noqa: F811
    rows = overview_rows(server)
    open_page(page, server.url + "/")
    page.wait_for_selector("#chart-across.js-plotly-plot")
    drawn = chart(page)
    both = [r for r in rows if r["max_response_len"] is not None and r["rollout_idle_frac_mean"] is not None]
    assert sorted(p[0] for p in drawn["points"]) == sorted(r["run_id"] for r in both)
    assert drawn["x"] == "Response-length cap (tokens)" and drawn["y"].startswith("Rollout idle")
    # one trace per worst severity, the worst drawn last (on top)
    names = page.evaluate("document.getElementById('chart-across').data.map(t => t.name)")
    assert names == ["no warnings", "warnings", "critical findings"]
    critical = {p[0] for p in drawn["points"] if p[3] == "critical findings"}
    assert critical == {r["run_id"] for r in both if r["findings_critical"]}
    options = page.locator("#across-x option").evaluate_all("os => os.map(o => o.value)")
    assert options == list(FIGURES)
    page.select_option("#across-x", "gpus")
    page.select_option("#across-y", "step_s_mean")
    page.wait_for_function("""() => { const l = document.getElementById('chart-across').layout;
        return l.xaxis.title.text === 'GPUs' && l.yaxis.title.text === 'Mean step time (s)'; }""")
    drawn = chart(page)
    by_id = {r["run_id"]: r for r in rows}
    assert {p[0] for p in drawn["points"]} == \
        {r["run_id"] for r in rows if r["gpus"] is not None and r["step_s_mean"] is not None}
    assert all(p[1] == by_id[p[0]]["gpus"] and p[2] == pytest.approx(by_id[p[0]]["step_s_mean"])
               for p in drawn["points"])
    assert url_state(page) == {"x": "gpus", "y": "step_s_mean"}
    # hover names the run and gives both figures in their units
    hover = page.evaluate("document.getElementById('chart-across').data[0].hovertemplate")
    assert "%{text}" in hover and "GPUs: %{customdata[0]}" in hover
    custom = page.evaluate("document.getElementById('chart-across').data[0].customdata[0][1]")
    assert re.fullmatch(r"[\d.,]+ (s|min)", custom), custom
    screenshot(page, "runs-overview.png")
    # a click on a marker opens its run
    target = page.evaluate("""() => {
        const el = document.getElementById('chart-across'), t = el.data[el.data.length - 1];
        el.scrollIntoView();
        const xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis, box = el.getBoundingClientRect();
        return {id: t.ids[0], x: box.left + xa._offset + xa.l2p(t.x[0]),
                y: box.top + ya._offset + ya.l2p(t.y[0])};
    }""")
    page.mouse.move(target["x"], target["y"])
    page.mouse.click(target["x"], target["y"])
    page.wait_for_url(f"**/runs/{target['id']}")
    assert console_errors(page) == []


def test_selection_for_compare_spans_pages_and_sorts(page, server):  # noqa: F811
    rows = overview_rows(server)
    open_page(page, server.url + "/")
    first, last = rows[0]["run_id"], rows[-1]["run_id"]
    page.check(f"#runs input[value='{first}']")
    assert page.is_disabled("#compare-selected")
    page.click("#page-next")
    page.check(f"#runs input[value='{last}']")
    page.locator("#runs th[data-col='samples'] button").click()
    assert page.is_enabled("#compare-selected")
    assert page.locator("#runs input:checked").evaluate_all("xs => xs.map(x => x.value)") == \
        [i for i in shown_ids(page) if i in (first, last)]
    page.click("#compare-selected")
    page.wait_for_url(f"**/compare?a={first}&b={last}")
    assert console_errors(page) == []


def test_a_run_added_after_the_page_loaded_is_listed(page, make_server, tmp_path):  # noqa: F811
    """No reload: the page polls the overview and lists the new run, marked new, on the chart."""
    from polytrace.workload.published import PUBLISHED_MATH
    from polytrace.workload.synth import write_math_steps

    srv = make_server()
    open_page(page, srv.url + "/")
    assert page.locator("#no-runs").is_visible() and page.locator("#across-title").is_hidden()
    (tmp_path / "run").mkdir()
    files = write_math_steps(PUBLISHED_MATH, tmp_path / "run", steps=2, prompts=8, n=4, cap=4096, seed=1)
    res = httpx.post(f"{srv.url}/api/runs", files=[("file", (p.name, p.read_bytes())) for p in files],
                     data={"name": "arrived later", "max_response_len": "4096"}, timeout=60)
    assert res.status_code == 201, res.text
    run_id = res.json()["run_id"]
    row = page.wait_for_selector(f"#runs tr.new[data-run-id='{run_id}']")
    assert row.query_selector("td.run a").inner_text() == "arrived later"
    assert page.get_attribute("#runs", "data-loaded") == "1" and page.locator("#no-runs").is_hidden()
    page.wait_for_selector("#chart-across[data-points='1']")
    assert [p[0] for p in chart(page)["points"]] == [run_id]
    assert page.locator("#across-title").is_visible()
    assert console_errors(page) == []


def test_a_run_deleted_from_its_row(page, make_server, tmp_path):  # noqa: F811
    db = tmp_path / "two.duckdb"
    build_db(db)
    srv = make_server(db=str(db))
    open_page(page, srv.url + "/")
    page.on("dialog", lambda d: d.accept())
    page.click("#runs tr[data-run-id='r4'] button[data-delete]")
    page.wait_for_selector(f"#runs[data-loaded='{7 + FILLERS}']")
    assert page.locator("#runs tr[data-run-id='r4']").count() == 0
    assert page.inner_text("#upload-status") == "Deleted packed, cap inferred."
    assert "r4" not in {r["run_id"] for r in overview_rows(srv)}
    assert console_errors(page) == []


def test_the_first_axes_are_figures_the_runs_have(page, make_server, tmp_path):  # noqa: F811
    """The golden runs alone: one has both a cap and a rollout idle share, so the chart opens on
    the first of its other pairs that the most runs have (the URL then names it)."""
    db = tmp_path / "golden.duckdb"
    con = load_case("findings", str(db))
    overview.refresh(con, [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()])
    con.close()
    srv = make_server(db=str(db))
    open_page(page, srv.url + "/")
    assert (page.input_value("#across-x"), page.input_value("#across-y")) == \
        ("tail_ratio_max", "rollout_idle_frac_mean")
    wait_points(page, {"r4", "r5"})
    assert url_state(page) == {"x": "tail_ratio_max"}  # y is the default
    # axes the URL names are kept, however few runs have them
    open_page(page, srv.url + "/?x=max_response_len")
    assert (page.input_value("#across-x"), page.input_value("#across-y")) == \
        ("max_response_len", "rollout_idle_frac_mean")
    wait_points(page, {"r5"})
    assert console_errors(page) == []

"""Live-run benchmark: what appending one step costs as the run grows, and how long a written line
takes to reach an open run page.

    python bench/live.py [--sizes 100,1000,10000] [--repeat 15] [--steps 10] [--history 5]
                         [--every 0] [--no-browser]

1. Append cost. A live run is built with N existing steps, each a verl console step line (the real
   i80f2v90 log's lines, renumbered; ~230 metrics) and a DAPO packed-lengths step (768 samples):
   the first step through the append path, the other N-1 copied in SQL, aggregates recomputed
   whole. Then `--repeat` new steps are appended as a follower appends them, and timed: the log
   line's append (rows, offsets, per-step aggregates), the packed step's, and the refresh of the
   run's line in the runs overview and its stored findings (queries.overview.refresh), which reads
   every step: it runs off the append path, at most every 2 s of a burst and once when the run
   goes quiet (server/watch.py OverviewLines). The append columns stay flat across N.
2. Line to chart. `polytrace serve --watch` follows a directory holding the log's first steps
   (with --history N, N step lines renumbered from the real ones); a headless Chromium opens the
   run page, scrolled to its first health chart (the charts in view follow the run; the others
   catch up when they come into view); each new step line written to the log is timed until that
   chart draws the step (past 600 steps, where a chart draws buckets of steps, until the page has
   refreshed its charts after the live status named the step) (needs /usr/bin/chromium and
   playwright; else until GET /api/runs/{id}/live reports it). A line is written as soon as the
   one before is drawn, or `--every` seconds later (a real RL step takes tens of seconds; the
   server sums the run up a second after each step, which a line written at once competes with).
"""
from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from polytrace import store  # noqa: E402
from polytrace.ingest.live import Chunk, live_run_id  # noqa: E402
from polytrace.ingest.options import POLL_S  # noqa: E402
from polytrace.ingest.load import append_chunk  # noqa: E402
from polytrace.queries import overview  # noqa: E402
from polytrace.queries.display import MAX_POINTS  # noqa: E402
from polytrace.store.aggregates import materialize  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
LOG = DATA / "verl-logs" / "qwen3-4b-agent-run-i80f2v90.output.log"
PACKED = DATA / "polytrace" / "verl" / "profile" / "packed_length_log" / "20260614_023133" / "packed_lengths_step_0.jsonl"
STEP = re.compile(rb"^step:\d+")
CHROMIUM = Path("/usr/bin/chromium")


def step_lines() -> list[bytes]:
    """The log's training step lines (not its validation-only step 0), to be renumbered."""
    lines = [line + b"\n" for line in LOG.read_bytes().split(b"\n") if line.startswith(b"step:")]
    return [line for line in lines if b"timing_s/step" in line]


def renumbered(line: bytes, step: int) -> bytes:
    return STEP.sub(b"step:%d" % step, line, count=1)


def packed_step(step: int) -> bytes:
    return re.sub(rb'"step": \d+', b'"step": %d' % step, PACKED.read_bytes())


def build(con, run_id: str, n: int, lines: list[bytes]) -> int:
    """A live run of n steps; the log's committed offset."""
    first = renumbered(lines[0], 0)
    append_chunk(con, run_id, Chunk("output.log", 0, first, format="verl-console"), name="bench", source="bench")
    append_chunk(con, run_id, Chunk("packed_lengths_step_0.jsonl", 0, packed_step(0), format="polytrace-packed",
                                    complete=True, mtime=0.0), source="bench")
    with store.transaction(con):
        for table in ("samples", "step_metrics"):
            con.execute(f"INSERT INTO {table} SELECT t.* REPLACE (t.step + r.range AS step) FROM {table} t, "
                        "range(1, $n) r WHERE t.run_id = $run AND t.step = 0", {"run": run_id, "n": n})
        materialize(con, run_id)
    overview.refresh(con, [run_id])
    # the log as if its n lines had been committed: the next append starts after them
    offset = len(first) * n
    con.execute("UPDATE live_files SET committed = ? WHERE live_run = ? AND file_name = 'output.log'",
                [offset, run_id])
    return offset


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def append_costs(n: int, repeat: int, lines: list[bytes]) -> dict[str, float]:
    """Median seconds per appended step at n existing steps."""
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-live-") as tmp:
        con = store.open(Path(tmp) / "live.duckdb")
        run_id = "bench-live"
        offset = build(con, run_id, n, lines)
        log, packed, line = [], [], []
        for i in range(repeat):
            step = n + i
            data = renumbered(lines[(i + 1) % len(lines)], step)
            log.append(timed(append_chunk, con, run_id, Chunk("output.log", offset, data)))
            offset += len(data)
            packed.append(timed(append_chunk, con, run_id, Chunk(f"packed_lengths_step_{step}.jsonl", 0,
                                                                 packed_step(step), format="polytrace-packed",
                                                                 complete=True, mtime=0.0)))
            line.append(timed(overview.refresh, con, [run_id]))
        rows = con.execute("SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM step_metrics)").fetchone()
        con.close()
    return {"log_line_s": statistics.median(log), "packed_step_s": statistics.median(packed),
            "overview_line_s": statistics.median(line), "samples": rows[0], "metrics": rows[1]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_parts(history: int, steps: int) -> tuple[bytes, list[bytes]]:
    """The log as the server first finds it (steps 1 to `history`), and each timed step's bytes.
    Up to step 5 the real log's own lines (with what it prints between steps); past it, its step
    lines renumbered."""
    lines = [line + b"\n" for line in LOG.read_bytes().split(b"\n")]
    starts = [i for i, line in enumerate(lines) if line.startswith(b"step:")]
    if history == 5:
        return (b"".join(lines[:starts[6]]),
                [b"".join(lines[starts[k - 1] + 1:starts[k] + 1]) for k in range(6, 6 + steps)])
    real = step_lines()
    body = [renumbered(real[(k - 1) % len(real)], k) for k in range(1, history + steps + 1)]
    return b"".join(lines[:starts[1]]) + b"".join(body[:history]), body[history:]


def line_to_chart(steps: int, history: int, browser: bool, every_s: float = 0.0) -> list[float]:
    """Seconds from a step line written to the log to the run page drawing it (or the API saying it);
    each line is written `every_s` after the one before was drawn."""
    import httpx

    head, appended = log_parts(history, steps)
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-watch-") as tmp:
        root = Path(tmp) / "job"
        root.mkdir()
        log = root / "output.log"
        log.write_bytes(head)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "polytrace", "serve", "--db", f"{tmp}/db.duckdb",
                                   "--port", str(port), "--watch", str(root)], cwd=ROOT, stderr=subprocess.DEVNULL)
        run_id = live_run_id(root)
        try:
            wait(lambda: _live(httpx, url, run_id).get("last_step") == history, timeout_s=600)
            if browser:
                return _in_browser(url, run_id, log, appended, history + 1, history >= MAX_POINTS, every_s)
            delays = []
            for k, data in enumerate(appended, history + 1):
                time.sleep(every_s)
                t = time.perf_counter()
                with open(log, "ab") as f:
                    f.write(data)
                wait(lambda step=k: _live(httpx, url, run_id).get("last_step") == step)
                delays.append(time.perf_counter() - t)
            return delays
        finally:
            server.terminate()
            server.wait(timeout=30)


def _live(httpx, url: str, run_id: str) -> dict:
    try:
        r = httpx.get(f"{url}/api/runs/{run_id}/live", timeout=5)
        return r.json() if r.status_code == 200 else {}
    except httpx.HTTPError:
        return {}


def wait(ready, timeout_s: float = 60, every_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {timeout_s} s")
        time.sleep(every_s)


WATCHED = "e.info.linked && e.info.name.startsWith('health_')"  # the chart a step is timed to
DRAWN = f"""k => PolyCharts.entries.some(e => {WATCHED} &&
    e.el.data && e.el.data.some(t => !(t.meta && t.meta.finding) && (t.x || []).includes(k)))"""
# a page whose charts draw buckets of steps: the live badge names step k and the charts have been
# refreshed since (live.js counts their refreshes in data-charts-refreshed)
CHARTS_REFRESHED = "Number(document.getElementById('live-badge').dataset.chartsRefreshed || 0)"
REFRESHED = f"""([k, before]) => document.getElementById('live-badge').dataset.lastStep === String(k)
    && {CHARTS_REFRESHED} > before"""


def _in_browser(url: str, run_id: str, log: Path, appended: list[bytes], first: int,
                bucketed: bool, every_s: float) -> list[float]:
    from playwright.sync_api import sync_playwright

    delays = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = b.new_page(viewport={"width": 1366, "height": 900})
        page.goto(f"{url}/runs/{run_id}")
        page.wait_for_selector("#live-badge[data-live='1']", timeout=60_000)
        page.wait_for_selector("body[data-charts-ready='1']", timeout=60_000)
        # the chart watched, in view (those out of view catch up when they come into view)
        page.evaluate(f"() => PolyCharts.entries.find(e => {WATCHED}).el.scrollIntoView()")
        for k, data in enumerate(appended, first):
            time.sleep(every_s)
            before = page.evaluate(CHARTS_REFRESHED)
            t = time.perf_counter()
            with open(log, "ab") as f:
                f.write(data)
            if bucketed:
                page.wait_for_function(REFRESHED, arg=[k, before], timeout=60_000, polling=20)
            else:
                page.wait_for_function(DRAWN, arg=k, timeout=60_000, polling=20)
            delays.append(time.perf_counter() - t)
        b.close()
    return delays


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10, help="step lines timed from disk to the chart")
    ap.add_argument("--history", type=int, default=5, help="steps the followed log holds before the timed ones")
    ap.add_argument("--every", type=float, default=0.0,
                    help="seconds between a step drawn and the next line written (0: at once; a real "
                         "RL step takes tens of seconds, and the server sums the run up after each)")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    lines = step_lines()
    print(f"{'steps':>7} {'samples':>11} {'metrics':>10} {'log line':>10} {'packed step':>12} {'overview line':>14}")
    for n in (int(s) for s in args.sizes.split(",")):
        c = append_costs(n, args.repeat, lines)
        print(f"{n:>7,} {c['samples']:>11,} {c['metrics']:>10,} {c['log_line_s'] * 1e3:>8.1f}ms "
              f"{c['packed_step_s'] * 1e3:>10.1f}ms {c['overview_line_s'] * 1e3:>12.1f}ms")
    browser = not args.no_browser and CHROMIUM.exists()
    delays = line_to_chart(args.steps, args.history, browser, args.every)
    target = "the run page's chart draws it" if browser else "GET /api/runs/{id}/live reports it"
    p95 = statistics.quantiles(delays, n=20, method="inclusive")[-1]
    print(f"line written -> {target}, {args.history:,} steps before: median {statistics.median(delays):.2f} s, "
          f"p95 {p95:.2f} s, max {max(delays):.2f} s "
          f"over {len(delays)} steps, a line {args.every:g} s after the step before was drawn "
          f"(watcher poll {POLL_S} s, the page's poll held until the run changes)")


if __name__ == "__main__":
    main()

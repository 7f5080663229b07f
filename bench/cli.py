"""What a user pays for each light command: `polytrace --help`, `polytrace findings RUN` and
`polytrace query NAME -p run_id=RUN` on an answer the run's last write kept, each against a bare
`python -c "import duckdb"` in the same run (issue 42's bound: 1.5x).

Ingests one real log (default: the shared verl console log) into a fresh database, then runs each
command --repeat times in turn, one after another, as a new process the way a shell runs it
(bytecode caches allowed and warmed first, as on a user's machine), and prints the median wall
time of each and its ratio to the bare import.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("POLYTRACE_TEST_DATA", ROOT.parent / "shared" / "data"))
DEFAULT_LOG = DATA / "verl-logs" / "qwen3-4b-agent-run-i80f2v90.output.log"
BOUND = 1.5


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def polytrace(*args: str) -> list[str]:
    return [sys.executable, "-m", "polytrace", *args]


def ingested(log: Path, db: Path) -> str:
    out = subprocess.run(polytrace("ingest", str(log), "--db", str(db)), env=env(), check=True,
                         capture_output=True, text=True).stdout
    return out.split()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", type=Path, default=DEFAULT_LOG, help="a log to ingest (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if not args.log.is_file():
        sys.exit(f"no log at {args.log}: give one with --log")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "cli.duckdb"
        run_id = ingested(args.log, db)
        commands = {
            'python -c "import duckdb"': [sys.executable, "-c", "import duckdb"],
            "polytrace --help": polytrace("--help"),
            "polytrace findings RUN": polytrace("findings", run_id, "--db", str(db)),
            "polytrace query run_summary (kept)": polytrace("query", "run_summary", "-p", f"run_id={run_id}",
                                                            "--db", str(db)),
            "polytrace query metric_keys (kept), --output json": polytrace(
                "query", "metric_keys", "-p", f"run_id={run_id}", "--db", str(db), "--output", "json"),
        }
        for argv in commands.values():  # warm: the bytecode caches and the page cache
            timed(argv)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, argv in commands.items():
                times[name].append(timed(argv))
    base = statistics.median(times['python -c "import duckdb"'])
    print(f"load {os.getloadavg()[0]:.1f}; {args.repeat} runs each, median wall time; bound {BOUND}x")
    for name, got in times.items():
        median = statistics.median(got)
        print(f"  {name:52} {median * 1000:7.0f} ms  {median / base:5.2f}x")


if __name__ == "__main__":
    main()

"""verl-console parse speed on the shared verl logs, scaled up, vs the PolyTrace suite's regex parser and a read+split floor."""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)
SOURCE = ROOT.parent / "shared" / "data" / "verl-logs"
_STEP = re.compile(r"^step:(\d+)", re.MULTILINE)

# The suite's own approach (suite.py parse_log): strip ANSI, then findall key:number on every
# line holding step: and timing_s/. It keeps fewer values (no np.float64(...), no cut handling).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KV = re.compile(r"([A-Za-z0-9_./-]+):([-+0-9.eE]+)")


def suite_parse(path: Path) -> int:
    n = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = _ANSI.sub("", line)
            if "timing_s/" in line and "step:" in line:
                n += sum(1 for _ in _KV.findall(line))
    return n


def generate(out: Path, copies: int) -> int:
    """The shared logs repeated under fresh step numbers, so no step repeats."""
    texts = [p.read_text() for p in sorted(SOURCE.glob("*.log"))]
    if not texts:
        sys.exit(f"no verl logs under {SOURCE}")
    offset, parts = 0, []
    for _ in range(copies):
        for text in texts:
            parts.append(_STEP.sub(lambda m, o=offset: f"step:{int(m.group(1)) + o}", text))
            offset += 1000
    out.write_text("".join(parts))
    return out.stat().st_size


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    from polytrace.ingest.formats import verl_console

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--copies", type=int, default=20, help="copies of the two shared logs")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.output.log"
        size = generate(path, args.copies)
        floor = best_of(lambda: path.read_bytes().decode().split("\n"), args.repeat)
        suite = best_of(lambda: suite_parse(path), args.repeat)
        ours = best_of(lambda: verl_console.parse(path), args.repeat)
        rows = verl_console.parse(path).tables["step_metrics"].num_rows
    mb = size / 1e6
    print(f"input {mb:.1f} MB, {rows} step_metrics rows")
    print(f"read+split floor   {floor:7.3f} s  {mb / floor:8.1f} MB/s")
    print(f"suite.py regex     {suite:7.3f} s  {mb / suite:8.1f} MB/s")
    print(f"verl-console parse {ours:7.3f} s  {mb / ours:8.1f} MB/s  "
          f"({ours / suite:.2f}x the suite's time, {ours / floor:.0f}x the floor)")


if __name__ == "__main__":
    main()

"""What `serve --watch` and `watch` share: the followed directories and the follower's options."""
from __future__ import annotations

from pathlib import Path

from polytrace.cli.errors import CliError


def follow_options(p, watch_flag: str | None = None) -> None:
    from polytrace.ingest.options import POLL_S, SETTLE_S

    if watch_flag:
        p.add_argument(watch_flag, action="append", metavar="DIR",
                       help="follow this directory as a training job writes it, as one run "
                       "(repeat for several)")
    p.add_argument("--settle", type=float, default=SETTLE_S, metavar="S",
                   help=f"a step file or trace unchanged this long is complete (default {SETTLE_S:g} s; "
                   "a later step's file completes it at once)")
    p.add_argument("--poll", type=float, default=POLL_S, metavar="S",
                   help=f"look for new bytes this often (default {POLL_S:g} s)")



def watched(paths: list[str]) -> list[Path]:
    for p in paths:
        if not Path(p).is_dir():
            raise CliError(f"--watch {p}: no such directory (give the folder a training job writes)")
    return [Path(p) for p in paths]


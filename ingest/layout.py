"""What the path of a PolyTrace log (`<repo>/profile/<kind>_log/<stamp>/<file>`) says about its run."""
from __future__ import annotations

from pathlib import Path

FRAMEWORKS = ("verl", "rllm", "openrlhf", "areal", "slime")


def run_facts(path: Path) -> dict:
    """{'framework': ...} when the repo folder above `profile/` names a known framework."""
    parts = [p.lower() for p in path.resolve().parts]
    if "profile" not in parts[:-1]:
        return {}
    i = len(parts) - 1 - parts[::-1].index("profile")
    if i == 0 or not parts[i + 1 : i + 2] or not parts[i + 1].endswith("_log"):
        return {}
    repo = parts[i - 1]
    framework = next((f for f in FRAMEWORKS if repo == f or repo.startswith(f + "-")), None)
    return {"framework": framework} if framework else {}

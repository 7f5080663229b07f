"""CPU time and memory of this process and every process below it, parse workers included.

Parse workers are forked by a forkserver, so they are this process's grandchildren: they are
waited for by the forkserver, not by us, and getrusage(RUSAGE_CHILDREN) would count them only
once the forkserver itself has exited and been waited for (at interpreter exit). So each
living descendant is read from /proc (Linux): its own CPU time plus that of the children it
has waited for, which for the forkserver is every worker that has finished.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(root: int) -> list[int]:
    """Every living process below `root`, at any depth."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_of(pid: int) -> float:
    """utime + stime + cutime + cstime of a process, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / _TICKS


def cpu_s() -> float:
    """CPU seconds of this process, of its waited-for children, and of every living descendant
    with the children it has waited for (the forkserver's finished parse workers)."""
    own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                resource.getrusage(resource.RUSAGE_CHILDREN)))
    return own + sum(cpu_of(pid) for pid in descendants(os.getpid()))


def tree_rss_mb(root: int) -> float:
    """Resident memory of a process and all its descendants now, in MB (shared pages count
    once per process)."""
    total = 0
    for pid in (root, *descendants(root)):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * _PAGE / 1e6

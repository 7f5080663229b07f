"""CPU time that counts the parse worker processes an ingest forks, not only this process."""
from __future__ import annotations

import resource


def cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))

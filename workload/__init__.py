"""The PolyTrace suite: synthesize workloads, simulate rollout under dispatch policies, and the demo run."""


class WorkloadError(Exception):
    """Bad input to a workload tool; the message is one line, fit to show a user."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))

"""The CLI's one failure: a line for the user."""
from __future__ import annotations


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


"""The store's errors: one line each, fit to show a user as is."""
from __future__ import annotations


class StoreError(Exception):
    """A database or lake that cannot be used as asked."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class Timeout(StoreError):
    """Work interrupted at its time limit."""

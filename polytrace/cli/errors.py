"""The CLI's one failure: a line for the user; and text from files made safe for a terminal."""
from __future__ import annotations


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""



def shown(text: object) -> str:
    """`text` with every control character escaped (\\x1b, \\n, ...): a file's name or bytes
    cannot move the cursor, clear the screen or start a second line of what the CLI says."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)

"""The CLI's one failure: a line for the user; and text from files made safe for a terminal."""
from __future__ import annotations

from polytrace.queries.render import printable


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""



def shown(text: object) -> str:
    """`text` with every control character escaped (\\x1b, \\n, ...): a file's name or bytes
    cannot move the cursor, clear the screen or start a second line of what the CLI says."""
    return printable(str(text))

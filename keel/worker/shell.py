"""Commands a person copies into a shell, and the characters a session id may have.

Everything Keel prints for a person to run (``keel approve SESSION ID`` after a turn, in
``keel pending``, on the web page) is built by ``command``: each word is quoted with
``shlex.quote``, so pasting the line runs exactly that ``keel`` command, whatever the session
or interrupt id holds. (Workflow code cannot import ``shlex``; ``keel.workflows.notifications``
quotes the same way by hand.)

A session id that ``keel`` accepts has only the characters of ``SESSION_ID_CHARS``, which no
shell treats specially, and does not start with ``-`` (it would read as a flag). An id you
choose for a new session has at most ``MAX_NEW_SESSION_ID`` of them; ids Keel derives from
one are longer (a schedule's ``NAME-2026-12-01T02:00:00Z``, a sub-agent's
``PARENT/NAME-TOOLUSEID`` or ``PARENT/agent-HEX``) and use the same characters, so every
command takes ids of up to ``MAX_SESSION_ID`` characters, Temporal's default limit on a
workflow id.
"""

from __future__ import annotations

import re
import shlex

# The characters of a session id, as the one-line refusal names them.
SESSION_ID_CHARS = "A-Z a-z 0-9 . _ : / @ -"
_SESSION_ID = re.compile(r"[A-Za-z0-9._:/@-]*")
# The longest id of a new session (``keel run --session``).
MAX_NEW_SESSION_ID = 200
# The longest id any command takes: Temporal's default ``limit.maxIDLength``.
MAX_SESSION_ID = 1000


def command(*argv: str) -> str:
    """``argv`` as one shell command line: each word quoted where the shell would read it."""
    return " ".join(shlex.quote(word) for word in argv)


def session_id_problem(value: str, *, new: bool = False) -> str | None:
    """What is wrong with ``value`` as a session id, in words; None when nothing is.

    Args:
        value: the id as typed.
        new: it names a session to create, so it may be at most ``MAX_NEW_SESSION_ID`` long
            (else ``MAX_SESSION_ID``, for ids Keel derived from one).
    """
    limit = MAX_NEW_SESSION_ID if new else MAX_SESSION_ID
    rule = f"a session id has 1-{limit} characters of {SESSION_ID_CHARS}, not starting with '-'"
    if not value:
        return f"the session id is empty: {rule}"
    if not _SESSION_ID.fullmatch(value):
        bad = sorted({c for c in value if not _SESSION_ID.fullmatch(c)})
        shown = " ".join(ascii(c) for c in bad[:8]) + (" ..." if len(bad) > 8 else "")
        return f"{ascii(_clip(value))} has characters a session id may not have ({shown}): {rule}"
    if value.startswith("-"):
        return f"{value!r} starts with '-': {rule}"
    if len(value) > limit:
        return f"the session id is {len(value)} characters long: {rule}"
    return None


def _clip(value: str, limit: int = 80) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"

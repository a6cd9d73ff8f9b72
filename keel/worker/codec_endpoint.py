"""The secret in ``keel codec-server``'s endpoint URL, kept among the folder's private records.

The Temporal Web UI calls ``<codec endpoint>/decode`` with no ``Authorization`` header (its
"pass the user access token" needs https and a UI login), so the endpoint URL itself is the
credential: ``http://127.0.0.1:PORT/<secret>``, where ``<secret>`` is 256 random bits. It is
made once per ``KEEL_HOME`` and kept in ``codec.json`` among that folder's records in the
user's state directory (``keel.worker.server.records``: 0600 in 0700 directories), so the
endpoint an operator pasted into the UI keeps working when the codec server restarts;
``keel codec-server --new-secret`` replaces it (the old URL stops working at once).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from keel.worker.server.records import read_private, records_dir, write_private

logger = logging.getLogger(__name__)

RECORD_FILE = "codec.json"
# token_urlsafe(32): 43 characters of A-Z a-z 0-9 - _ (256 bits), safe in a URL path.
SECRET_BYTES = 32
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def codec_record_path(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> Path:
    """Where the codec endpoint's secret for ``home`` (``KEEL_HOME``) is kept."""
    return records_dir(home, state_home) / RECORD_FILE


def well_formed(secret: object) -> bool:
    """Whether ``secret`` is one this module makes: 43 URL-safe characters."""
    return isinstance(secret, str) and len(secret) == 43 and set(secret) <= _ALPHABET


def endpoint_secret(
    home: str | os.PathLike[str],
    state_home: str | os.PathLike[str] | None = None,
    *,
    renew: bool = False,
) -> tuple[str, bool]:
    """The secret of ``home``'s codec endpoint, made (and kept) when there is none.

    Args:
        home: ``KEEL_HOME``.
        state_home: the user's state directory (``Settings.state_home``).
        renew: make a new one even when one is kept.

    Returns:
        The secret, and whether it is kept (False: the record could not be written, so the
        secret lasts as long as this process; a warning says why).
    """
    path = codec_record_path(home, state_home)
    if not renew:
        record = read_private(path, home)
        if record is not None and well_formed(record.get("secret")):
            return str(record["secret"]), True
    secret = secrets.token_urlsafe(SECRET_BYTES)
    try:
        write_private(path, home, {"secret": secret})
    except OSError as err:
        logger.warning(
            "cannot keep the codec endpoint's secret in %s (%s): it lasts until this server stops",
            path,
            err,
        )
        return secret, False
    return secret, True

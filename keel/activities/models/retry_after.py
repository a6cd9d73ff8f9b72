"""``Retry-After``: how long a server that answered 429 or 503 asks its client to wait."""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime

# Longer than any sensible wait: a value past it is read as this (the activity caps it anyway).
MAX_RETRY_AFTER_S = 24 * 3600.0


def retry_after_s(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    Args:
        value: the header's value; None or unreadable: no delay asked for.
        now: the time to count a date from (default: now).

    Returns:
        The delay (0 for a date past), or None.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delay = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(delay, 0.0), MAX_RETRY_AFTER_S) if math.isfinite(delay) else None

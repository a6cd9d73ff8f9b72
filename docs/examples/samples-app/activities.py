"""Your own activities."""

from __future__ import annotations

from temporalio import activity


@activity.defn
async def shout(text: str) -> str:
    """The text, louder."""
    return text.upper() + "!"

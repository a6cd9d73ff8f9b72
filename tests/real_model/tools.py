"""The real-model lane's tools: one, with an obvious name, so a 135M model can call it.

Each result carries a marker (``WEATHER-<city>-<n>``) that the lane then looks for in the
next model request, to prove that the result went back to the model.
"""

from __future__ import annotations

import itertools

from keel import tool

_RUNS = itertools.count(1)


@tool
def get_weather(city: str = "") -> str:
    """Get the current weather in a city.

    Args:
        city: the city's name, e.g. Paris.
    """
    return f"WEATHER-{city or 'nowhere'}-{next(_RUNS)}: sunny, 21 C"

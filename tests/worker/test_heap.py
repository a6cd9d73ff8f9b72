"""freeze_startup_heap: what a worker process has made at startup is left out of the GC."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from keel.worker.process.assembly import freeze_startup_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test session collects as usual


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_live_startup_objects_are_frozen_and_garbage_is_collected_first(unfrozen: None) -> None:
    live = _Cycle()
    garbage = _Cycle()
    del garbage  # unreachable, only its own cycle keeps it: must be collected, not frozen
    frozen = freeze_startup_heap()
    assert frozen == gc.get_freeze_count() > 0
    assert not any(type(o) is _Cycle for o in gc.get_objects())  # frozen: not in any generation
    gc.unfreeze()
    assert [o for o in gc.get_objects() if type(o) is _Cycle] == [live]

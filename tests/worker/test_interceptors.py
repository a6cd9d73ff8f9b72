"""The cycle header that every activity started in a turn carries."""

from __future__ import annotations

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadConverter

from keel.worker.process.interceptors import CYCLE_HEADER, _cycle_from_header, _cycle_payload


@pytest.mark.parametrize(("turn", "cycle"), [(1, 1), (3, 12), (1000, 0)])
def test_the_header_is_what_the_default_converter_makes(turn: int, cycle: int) -> None:
    expected = PayloadConverter.default.to_payloads([{"turn": turn, "cycle": cycle}])[0]
    assert _cycle_payload(turn, cycle) == expected
    assert _cycle_from_header({CYCLE_HEADER: expected}) == {"turn": turn, "cycle": cycle}


@pytest.mark.parametrize(
    "payload",
    [
        Payload(metadata={"encoding": b"json/plain"}, data=b"not json"),
        Payload(metadata={"encoding": b"json/plain"}, data=b'{"turn": 1}'),
        Payload(metadata={"encoding": b"json/plain"}, data=b'{"turn": "x", "cycle": 1}'),
        Payload(metadata={"encoding": b"json/plain"}, data=b"[1, 2]"),
        Payload(metadata={"encoding": b"binary/plain"}, data=b'{"turn": 1, "cycle": 1}'),
    ],
    ids=["not-json", "no-cycle", "bad-turn", "a-list", "not-json-encoding"],
)
def test_a_header_that_is_not_a_cycle_is_ignored(payload: Payload) -> None:
    assert _cycle_from_header({CYCLE_HEADER: payload}) == {}
    assert _cycle_from_header({}) == {}

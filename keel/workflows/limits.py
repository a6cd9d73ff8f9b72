"""Size limits on everything a person or a client sends a session, in one place.

A session carries its whole state (``keel.workflows.ledger.Ledger``) into its next run, in
the input of continue-as-new: one Temporal payload, which Temporal refuses above 2 MB
(``BLOB_CAP``). A value a session accepted, and its next run could not carry, would wedge the
session: every later request would fail. So every input is held to a limit here, checked by
the update's validator (refused, never written to history) and by the signal's handler
(logged and ignored); ``KeelClient`` and the CLI check the same before they send.

Sizes are bytes as a payload carries them: compact JSON in UTF-8 (for a string, without its
quotes; a control character takes six bytes there, escaped). The limits are chosen so
that the largest accepted value in every field at once, at every count limit, still fits one
payload with room for the session's configuration and what the model wrote
(``tests/workflows/test_limits.py`` builds that ledger and measures it):

==============================  ==========================================  =========
what the next run carries       worst case                                  bytes
==============================  ==========================================  =========
prompts queued                  ``QUEUED_PROMPT_BYTES``                       256,056
conversation not stored yet     the running prompt, guidance shown             296,673
guidance waiting                ``STEERING_QUEUED`` x ``STEER_BYTES``           40,059
standing approvals              ``STANDING_APPROVALS`` x 11 x ``TEST_BYTES``   199,005
closed interrupts (50)          ``ANSWER_BYTES`` (or a reason), a name         234,419
ended client calls (50)         a client name, the note kept, the key          134,869
turns (20)                      a cancel reason each                            44,011
events (50)                     names and ids (no tests, no texts)              22,619
update ids and answers          ``UPDATE_MEMORY_BYTES`` twice                  123,628
==============================  ==========================================  =========

1,332,977 bytes in all with a small configuration: about 700 KB under the 2 MB cap for a
larger configuration and what the model wrote. A client's result (``CLIENT_RESULT_BYTES``) is
not carried: a worker checks it before the session may continue-as-new, and the ledger then
keeps only its digest. A standing approval's tests (10, and its ``total``: 11 tests' worth,
with its other bounds, ``MAX_USES`` and ``MAX_FOR_S``) are kept in the approval only (its event
counts them) and dropped guidance is counted, not kept; a revoked approval is kept in the
revoke's answer (within ``UPDATE_MEMORY_BYTES``), and an answer in its interrupt and in the
cycle that waits for it (4,000 bytes per question the model's tool calls asked).

Pure module: imported by workflow code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from keel.workflows.contracts import (
    Answer,
    CancelInput,
    ClientResult,
    CloseInput,
    Condition,
    Decision,
    RevokeInput,
    SteerInput,
)


class InputRejected(ValueError):
    """An input Keel refuses, with the reason (``keel.workflows.boundary`` exports it too)."""


LIMITS_PATCH = "keel-input-limits"
"""Where signals and start inputs are held to these limits: not in histories from before."""
BLOB_CAP = 2 * 1024 * 1024
"""Temporal's largest payload (its default ``limit.blobSize.error``)."""
NAME_BYTES = 200
"""An approver's, a responder's, a revoker's or a client's name."""
REASON_BYTES = 2_000
"""The reason of a decision, a cancel or a close."""
SIGNATURE_BYTES = 200
"""An approver's signature (an Ed25519 signature is 88 characters of base64)."""
TESTS_PER_APPROVAL = 10
"""Tests (``always_when``) of one standing approval."""
TEST_BYTES = 512
"""One test of a standing approval, as JSON: its field, operator and value."""
STANDING_APPROVALS = 32
"""Standing approvals one session holds at once (a new one for a tool replaces its old one)."""
MAX_USES = 1_000_000
"""The largest ``max_uses`` of a standing approval."""
MAX_FOR_S = 366 * 86_400.0
"""The longest a standing approval may be granted for (``for_s``): a year."""
ANSWER_BYTES = 4_000
"""The answer to a tool's question (``respond``), as JSON."""
RESOLVED_RESULT_BYTES = 64_000
"""A tool's result a person records with ``keel resolve`` (kept inline in the session)."""
STEER_BYTES = 4_000
"""One guidance text (``steer``)."""
STEERING_QUEUED = 10
"""Guidance texts waiting for the running turn's next model call."""
PROMPT_BYTES = 256_000
"""One prompt's content blocks, as JSON (an image or a document counts as its base64)."""
PROMPT_BLOCKS = 20
"""Content blocks of one prompt."""
QUEUED_PROMPTS = 100
"""Prompts waiting behind the running turn."""
QUEUED_PROMPT_BYTES = 256_000
"""All prompts waiting behind the running turn, together."""
CLIENT_RESULT_BYTES = 1_000_000
"""A client's result for a client-side tool (output and error), as JSON."""
CLIENT_ERROR_BYTES = 4_000
"""The error a client reports for a client-side tool that failed (the model is told it)."""
NOTE_CHARS = 1_000
"""What the ledger keeps of why an ended client call has no usable result."""
UPDATE_MEMORY_BYTES = 64_000
# The most a session's start input (settings, imported conversation, prompt, a replay's
# recording) may take encoded: Temporal takes at most 2 MB in one payload; what is left is
# for the encryption's few bytes and the search attributes.
MAX_START_BYTES = 1_500_000
"""Update ids a session remembers to answer a redelivery, and their answers (each kind)."""


def json_bytes(value: Any) -> int:
    """A value's size as compact JSON in UTF-8 (what a payload carries of it)."""
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(encoded.encode("utf-8", "surrogatepass"))


def text_bytes(text: str) -> int:
    """A string's size as a payload carries it: UTF-8, a control character escaped (6 bytes)."""
    return json_bytes(text) - 2  # not its quotes


def within(what: str, size: float, limit: float, unit: str = "bytes") -> None:
    """Refuse ``what`` when ``size`` is over ``limit``.

    Raises:
        InputRejected: naming what, its size and the limit.
    """
    if size > limit:
        raise InputRejected(f"{what} is {size:,} {unit}, over the limit of {limit:,} {unit}")


def _text(what: str, text: str | None, limit: int) -> None:
    if text is not None:
        within(what, text_bytes(text), limit)


def check_tests(tests: Sequence[Condition]) -> None:
    """The tests of a standing approval: how many, and each one's size."""
    within("always_when", len(tests), TESTS_PER_APPROVAL, "tests")
    for i, test in enumerate(tests):
        size = json_bytes(test.model_dump(mode="json"))
        within(f"always_when test {i + 1} ({test.field} {test.op} ...)", size, TEST_BYTES)


def check_decision(decision: Decision) -> None:
    """A ``decide`` update or signal."""
    _text("decision reason", decision.reason, REASON_BYTES)
    _text("approver", decision.approver, NAME_BYTES)
    _text("signature", decision.signature, SIGNATURE_BYTES)
    _text("resolved result", decision.result, RESOLVED_RESULT_BYTES)
    check_tests(decision.always_when)
    if decision.max_uses is not None:
        within("max_uses", decision.max_uses, MAX_USES, "uses")
    if decision.for_s is not None:
        within("for_s", decision.for_s, MAX_FOR_S, "seconds")
    if decision.total is not None:
        size = json_bytes(decision.total.model_dump(mode="json"))
        within(f"total ({decision.total.field} {decision.total.op} ...)", size, TEST_BYTES)


def check_answer(answer: Answer) -> None:
    """A ``respond`` update or signal."""
    within("answer", json_bytes(answer.value), ANSWER_BYTES)
    _text("responder", answer.responder, NAME_BYTES)
    _text("signature", answer.signature, SIGNATURE_BYTES)


def check_steer(steer: SteerInput, queued: int = 0) -> None:
    """A ``steer`` update; ``queued``: guidance texts already waiting."""
    _text("steering text", steer.text, STEER_BYTES)
    within("guidance waiting for the next model call", queued + 1, STEERING_QUEUED, "texts")


def check_revoke(revoke: RevokeInput) -> None:
    """A ``revoke`` update."""
    _text("revoking approver (by)", revoke.by, NAME_BYTES)


def check_reason(input: CancelInput | CloseInput) -> None:
    """A ``cancel`` update or a ``close`` signal."""
    what = "cancel" if isinstance(input, CancelInput) else "close"
    _text(f"{what} reason", input.reason, REASON_BYTES)


def check_client_result(result: ClientResult) -> None:
    """A ``tool_result`` update (the output's own limit is checked with its digest)."""
    _text("client name", result.client, NAME_BYTES)
    _text("a client's error", result.error, CLIENT_ERROR_BYTES)
    encoded = {"output": result.output, "error": result.error}
    within("a client's result", json_bytes(encoded), CLIENT_RESULT_BYTES)


def check_prompt_size(blocks: int, size: int) -> None:
    """One prompt: its blocks and their JSON bytes."""
    within("prompt", blocks, PROMPT_BLOCKS, "content blocks")
    within("prompt", size, PROMPT_BYTES)


def check_queue(queued: int, queued_bytes: int, size: int) -> None:
    """A prompt joining ``queued`` prompts of ``queued_bytes`` behind the running turn."""
    within("the queue of prompts behind the running turn", queued + 1, QUEUED_PROMPTS, "prompts")
    within(
        "the prompts queued behind the running turn, with this one",
        queued_bytes + size,
        QUEUED_PROMPT_BYTES,
    )


def check_standing_count(held: int, replacing: bool) -> None:
    """A new standing approval in a session holding ``held`` (``replacing``: its tool's)."""
    if not replacing and held >= STANDING_APPROVALS:
        raise InputRejected(
            f"this session holds {held} standing approvals, the limit; revoke one first "
            "(keel revoke) or approve this call alone"
        )


def check_input(value: object) -> None:
    """Whatever a client is about to send a session, checked as the session will check it.

    Raises:
        InputRejected: a field over its limit.
    """
    if isinstance(value, Decision):
        check_decision(value)
    elif isinstance(value, Answer):
        check_answer(value)
    elif isinstance(value, SteerInput):
        _text("steering text", value.text, STEER_BYTES)
    elif isinstance(value, RevokeInput):
        check_revoke(value)
    elif isinstance(value, CancelInput | CloseInput):
        check_reason(value)
    elif isinstance(value, ClientResult):
        check_client_result(value)

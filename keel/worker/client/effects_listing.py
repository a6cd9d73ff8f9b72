"""``keel effects``: every call of a ``write`` or ``idempotent`` tool, in order, with its attempts.

The session records only the calls that were not plain (``keel.workflows.effects``: retried,
reconciled, resolved, denied, answered from the journal, or unknown); a plain call (its body
ran once) is in the conversation, its attempt in the effects journal of the store
(``keel.activities.effects_journal``). This module puts the three together.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from keel.activities.effects_journal import EffectJournal
from keel.activities.store import ConversationStore, StoreError
from keel.workflows.activity_contracts import idempotency_key
from keel.workflows.effect_contracts import EffectAttempt, EffectRecord, EffectsView
from keel.workflows.messages import Message, tool_uses

__all__ = ["effect_records", "retried_text"]

logger = logging.getLogger(__name__)

# Attempts of finished calls (their journal is written once), by store and idempotency key:
# a page that lists a long session again and again reads each journal once.
FINISHED_KEPT = 4096
_FINISHED: OrderedDict[str, list[EffectAttempt]] = OrderedDict()


def effect_records(
    session_id: str,
    messages: list[Message],
    view: EffectsView,
    store: ConversationStore | None,
) -> list[EffectRecord]:
    """Each journaled call of the session, in the order the model made them.

    Blocking (it reads the store): call it in a thread.

    Args:
        session_id: the session (its calls' idempotency keys start with it).
        messages: the session's conversation (``KeelClient.state``).
        view: the session's ``effects`` query.
        store: the conversation store, for each call's attempts; without it (or when a
            journal cannot be read) the attempts are those the session recorded.
    """
    recorded = {r.tool_use_id: r for r in view.effects}
    results = {
        block.toolResult.toolUseId: block.toolResult.status
        for message in messages
        for block in message.content
        if block.toolResult is not None
    }
    listed: list[EffectRecord] = []
    for message in messages:
        for use in tool_uses(message):
            record = recorded.pop(use.toolUseId, None)
            if record is None and use.name in view.classes and use.toolUseId in results:
                record = EffectRecord(
                    tool=use.name,
                    tool_use_id=use.toolUseId,
                    idempotency_key=idempotency_key(session_id, use.toolUseId),
                    effect=view.classes[use.name],
                    outcome="done" if results[use.toolUseId] == "success" else "failed",
                )
            if record is not None:
                listed.append(record)
    listed.extend(recorded.values())  # calls of the cycle in progress, not appended yet
    return [_with_attempts(record, store) for record in listed]


def retried_text(detail: Mapping[str, Any]) -> str:
    """``retried (attempt N): previous attempt ...`` of a ``tool_retried`` event.

    Its ``previous`` says, in words, how the attempt before ended: a phrase (``ended without
    a result``), or a whole account that names the attempt (``attempt 1 (started ...) ended
    ...``).
    """
    previous = detail.get("previous")
    if not previous:
        said = ""
    elif str(previous).startswith("attempt "):
        said = f": {previous}"
    else:
        said = f": previous attempt {previous}"
    return f"retried (attempt {detail.get('attempt')}){said}"


def _with_attempts(record: EffectRecord, store: ConversationStore | None) -> EffectRecord:
    if store is None:
        return record
    key = f"{store.name}\0{record.idempotency_key}"
    attempts = _FINISHED.get(key)
    if attempts is None:
        try:
            journal = EffectJournal(store.backend, record.idempotency_key).read()
        except (StoreError, OSError, ValueError) as err:
            logger.warning("cannot read the journal of %s: %s", record.idempotency_key, err)
            return record
        attempts = journal.attempts
        if journal.done is not None:  # a finished call's journal never changes: keep it
            _FINISHED[key] = attempts
            while len(_FINISHED) > FINISHED_KEPT:
                _FINISHED.popitem(last=False)
    if not attempts:  # resolved or denied before any attempt of this client's store
        return record
    return record.model_copy(update={"attempts": attempts})

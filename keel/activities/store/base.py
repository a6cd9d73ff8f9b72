"""The conversation store: immutable, content-addressed messages and prefix segments.

A message is stored under the SHA-256 of its canonical JSON (sorted keys, no spaces, UTF-8).
A conversation prefix is a chain of segments, ``{"parent": <segment digest or null>,
"messages": [<message digests>]}``, itself stored under its digest: one short reference names
any prefix, however long. Writes are idempotent (same content, same key), so activity retries
are harmless; reads verify the digest, so a corrupted object is caught, not fed to a model.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from keel.workflows.contracts import PrefixRef
from keel.workflows.messages import ContentBlock, Message

MESSAGE_CACHE = 20_000
PREFIX_CACHE = 256


class StoreError(Exception):
    """The store cannot give back what a reference names; retrying will not help."""


class StoreMissing(StoreError):
    """No object under that digest."""


class StoreCorrupt(StoreError):
    """The object under that digest does not hash to it."""


class BlobBackend(Protocol):
    """Where bytes live: a local directory, an S3 bucket.

    Its calls block: Keel's activities make them in a worker thread, never on the event loop.
    """

    def put(self, key: str, data: bytes) -> None:
        """Store bytes under a key; storing the same bytes again is harmless."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under a key.

        Raises:
            KeyError: nothing is stored under the key.
        """
        ...


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def message_digest(message: Message) -> str:
    """The SHA-256 hex digest of a message's canonical JSON."""
    return hashlib.sha256(canonical_json(message.model_dump(mode="json"))).hexdigest()


class ConversationStore:
    """Messages and prefix chains over a blob backend, with bounded in-process caches."""

    def __init__(self, backend: BlobBackend, name: str = "") -> None:
        """Wrap a backend.

        Args:
            backend: where the bytes go.
            name: how errors name this store (its spec).
        """
        self.backend = backend
        self.name = name
        self._lock = threading.Lock()
        self._messages: OrderedDict[str, Message] = OrderedDict()
        self._prefixes: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._documents: OrderedDict[str, Any] = OrderedDict()

    def extend(self, prefix: PrefixRef | None, messages: Sequence[Message]) -> PrefixRef | None:
        """Store messages after a prefix; returns the reference to the longer prefix.

        Args:
            prefix: the stored prefix they follow, or None for the start.
            messages: messages to add; with none, ``prefix`` is returned as it is.
        """
        if not messages:
            return prefix
        digests = [self._put_message(m) for m in messages]
        segment = {"parent": prefix.digest if prefix else None, "messages": digests}
        data = canonical_json(segment)
        digest = hashlib.sha256(data).hexdigest()
        self.backend.put(f"prefix/{digest}", data)
        base = self._digests(prefix) if prefix else ()
        self._remember(self._prefixes, digest, (*base, *digests), PREFIX_CACHE)
        return PrefixRef(digest=digest, count=(prefix.count if prefix else 0) + len(digests))

    def put_document(self, value: Any) -> str:
        """Store any JSON document (tool specs, say) under its digest; returns the digest."""
        return self._put("doc", canonical_json(value), value, self._documents, PREFIX_CACHE)

    def get_document(self, digest: str) -> Any:
        """A JSON document stored with ``put_document``.

        Raises:
            StoreMissing: nothing under that digest.
            StoreCorrupt: the content does not match its digest.
        """
        with self._lock:
            cached = self._documents.get(digest)
        if cached is not None:
            return cached
        value = json.loads(self._verified(f"doc/{digest}", digest))
        self._remember(self._documents, digest, value, PREFIX_CACHE)
        return value

    def with_results(self, message: Message, refs: Mapping[str, str]) -> Message:
        """The message with each toolResult named in ``refs`` read back from the store.

        A stored toolResult travels through workflow history without its content (the tool
        activity stored it with ``put_document``); ``refs`` maps its toolUseId to its digest.

        Raises:
            StoreMissing: nothing under a digest.
            StoreCorrupt: a stored object is not the result of that tool use.
        """
        if not refs:
            return message
        content = []
        for block in message.content:
            result = block.toolResult
            if result is not None and result.toolUseId in refs:
                stored = ContentBlock.model_validate(self.get_document(refs[result.toolUseId]))
                if stored.toolResult is None or stored.toolResult.toolUseId != result.toolUseId:
                    raise StoreCorrupt(
                        f"stored tool result {refs[result.toolUseId]} is not the result of "
                        f"tool use {result.toolUseId!r}"
                    )
                block = stored
            content.append(block)
        if all(new is old for new, old in zip(content, message.content, strict=True)):
            return message  # no block of it was sent by reference
        return message.model_copy(update={"content": content})

    def load(self, prefix: PrefixRef | None) -> list[Message]:
        """Every message of a stored prefix, in order.

        Raises:
            StoreMissing: an object of the chain is missing (naming its digest).
            StoreCorrupt: an object does not match its digest.
        """
        if prefix is None:
            return []
        digests = self._digests(prefix)
        if len(digests) != prefix.count:
            raise StoreCorrupt(
                f"stored prefix {prefix.digest} in {self.name} holds {len(digests)} messages, "
                f"the reference says {prefix.count}"
            )
        return [self._get_message(d) for d in digests]

    def _digests(self, prefix: PrefixRef) -> tuple[str, ...]:
        """Walk the segment chain back to a cached segment or the start."""
        chain: list[list[str]] = []
        digest: str | None = prefix.digest
        base: tuple[str, ...] = ()
        while digest is not None:
            with self._lock:
                cached = self._prefixes.get(digest)
            if cached is not None:
                base = cached
                break
            segment = json.loads(self._verified(f"prefix/{digest}", digest))
            chain.append(list(segment["messages"]))
            digest = segment["parent"]
        result = list(base)
        for part in reversed(chain):
            result.extend(part)
        self._remember(self._prefixes, prefix.digest, tuple(result), PREFIX_CACHE)
        return tuple(result)

    def _put_message(self, message: Message) -> str:
        data = canonical_json(message.model_dump(mode="json"))
        return self._put("msg", data, message, self._messages, MESSAGE_CACHE)

    def _put(
        self, kind: str, data: bytes, value: Any, cache: OrderedDict[str, Any], limit: int
    ) -> str:
        """Write an object under ``<kind>/<digest>`` unless this process already did."""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            known = digest in cache
        if not known:
            self.backend.put(f"{kind}/{digest}", data)
            self._remember(cache, digest, value, limit)
        return digest

    def _get_message(self, digest: str) -> Message:
        with self._lock:
            cached = self._messages.get(digest)
        if cached is not None:
            return cached
        message = Message.model_validate_json(self._verified(f"msg/{digest}", digest))
        self._remember(self._messages, digest, message, MESSAGE_CACHE)
        return message

    def _verified(self, key: str, digest: str) -> bytes:
        try:
            data = self.backend.get(key)
        except KeyError:
            raise StoreMissing(
                f"stored object {digest} ({key.split('/')[0]}) is missing from {self.name}"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreCorrupt(
                f"stored object {digest} in {self.name} is corrupted: its content does not "
                "hash to its name"
            )
        return data

    def _remember(self, cache: OrderedDict[str, Any], key: str, value: Any, limit: int) -> None:
        with self._lock:
            cache[key] = value
            cache.move_to_end(key)
            while len(cache) > limit:
                cache.popitem(last=False)

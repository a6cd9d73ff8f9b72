"""Keel's data converter: temporalio's pydantic JSON converter, built once, optionally encrypted.

On the wire it is ``temporalio.contrib.pydantic.pydantic_data_converter`` (same encodings, same
JSON), so any client using that converter talks to Keel. It differs in one way: the SDK makes a
new ``DataConverter`` for every payload it visits in a workflow task (to give it the payload's
serialization context), and each one builds its payload converter from the class. The pydantic
converter builds a JSON schema serializer and a type-adapter cache each time, about a tenth of
a replay's time. Keel's payload converter class reuses one set of encoding converters instead,
so the cache of type adapters is kept, too.

``data_converter(keyring)`` adds the encryption codec (``keel.worker.encryption``) when keys are
configured. A payload still encrypted once decoded (no keys here, or the codec could not
open it) fails to convert with an error naming its key, instead of an unknown encoding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
)

from keel.activities.store.encrypted import Keyring
from keel.worker.encryption import ENCODING, EncryptionCodec, missing_key


class _EncryptedWithoutKey(EncodingPayloadConverter):
    """Never encodes; converting a payload the codec left encrypted says which key and why."""

    @property
    def encoding(self) -> str:
        return ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise missing_key(payload)


# Stateless apart from the thread-safe LRU cache of type adapters, so one set serves all.
_ENCODINGS = (*PydanticPayloadConverter().converters.values(), _EncryptedWithoutKey())


class KeelPayloadConverter(CompositePayloadConverter):
    """``PydanticPayloadConverter``'s encodings, shared by every instance."""

    def __init__(self) -> None:
        """Use the shared encoding converters."""
        super().__init__(*_ENCODINGS)


DATA_CONVERTER = DataConverter(payload_converter_class=KeelPayloadConverter)
"""The data converter of Keel's clients, workers and replayers, without encryption."""


def data_converter(keyring: Keyring | None) -> DataConverter:
    """``DATA_CONVERTER``, with the encryption codec when ``keyring`` has keys.

    Encrypted, failures' messages and stack traces are encoded too (temporalio's
    ``DefaultFailureConverterWithEncodedAttributes``), so they are encrypted as well.
    """
    if keyring is None or not keyring.active:
        return DATA_CONVERTER
    return dataclasses.replace(
        DATA_CONVERTER,
        payload_codec=EncryptionCodec(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )

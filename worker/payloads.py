"""Keel's data converter: temporalio's pydantic JSON converter, built once.

On the wire it is ``temporalio.contrib.pydantic.pydantic_data_converter`` (same encodings, same
JSON), so any client using that converter talks to Keel. It differs in one way: the SDK makes a
new ``DataConverter`` for every payload it visits in a workflow task (to give it the payload's
serialization context), and each one builds its payload converter from the class. The pydantic
converter builds a JSON schema serializer and a type-adapter cache each time, about a tenth of
a replay's time. Keel's payload converter class reuses one set of encoding converters instead,
so the cache of type adapters is kept, too.
"""

from __future__ import annotations

from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import CompositePayloadConverter, DataConverter

# Stateless apart from the thread-safe LRU cache of type adapters, so one set serves all.
_ENCODINGS = tuple(PydanticPayloadConverter().converters.values())


class KeelPayloadConverter(CompositePayloadConverter):
    """``PydanticPayloadConverter``'s encodings, shared by every instance."""

    def __init__(self) -> None:
        """Use the shared encoding converters."""
        super().__init__(*_ENCODINGS)


DATA_CONVERTER = DataConverter(payload_converter_class=KeelPayloadConverter)
"""The data converter of Keel's clients, workers and replayers."""

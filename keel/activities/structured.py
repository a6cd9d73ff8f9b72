"""JSON Schema checks for structured output (``SessionConfig.output_schema``).

The model activity validates each ``final_result`` call against the output schema and
records the verdict in its result, so the workflow never runs a validator itself; clients
check that a schema is a JSON Schema before a session starts.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator


class OutputSchemaError(ValueError):
    """The output schema is not a valid JSON Schema."""


def _validator(schema: Any) -> Validator:
    if not isinstance(schema, dict):
        raise OutputSchemaError(f"output schema must be a JSON object, not {type(schema).__name__}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise OutputSchemaError(
            f"output schema is not a JSON Schema: {where}: {err.message}"
        ) from None
    validator: Validator = cls(schema)
    return validator


def check_output_schema(schema: Any) -> None:
    """Raise ``OutputSchemaError`` unless ``schema`` is a valid JSON Schema object."""
    _validator(schema)


def violations(schema: dict[str, Any], instance: Any) -> list[str]:
    """What is wrong with ``instance`` against ``schema``, sorted; empty when it is valid.

    Raises:
        OutputSchemaError: the schema itself is invalid.
    """
    found = []
    for err in _validator(schema).iter_errors(instance):
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        found.append(f"{where}: {err.message}")
    return sorted(found)

"""The ``bedrock:<model-id>`` provider: Amazon Bedrock's Converse API through boto3.

Spec: ``bedrock:<model-id>[?option=value&...]``. The model id is anything Bedrock accepts
as ``modelId`` (a model id, an inference profile id, an ARN). Options (``OPTIONS``):

- ``stream=false``: call ``Converse`` instead of ``ConverseStream`` (default ``true``).
  Without it the provider still falls back to ``Converse`` by itself, for the rest of the
  process, when Bedrock answers that the model does not support streaming.
- ``region=<aws-region>``: the region to call; by default the standard AWS configuration
  chain decides (``AWS_REGION`` / ``AWS_DEFAULT_REGION``, the profile's region).

This module imports no boto3: checking a spec is cheap. The calls are in
``keel.activities.models.bedrock_calls``, imported by the first one (in its thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from keel.activities.models.base import DeltaCallback, ModelError
from keel.activities.models.declared import (
    DeclaredProvider,
    Option,
    ParsedSpec,
    aws_region,
    flag,
)
from keel.workflows.activity_contracts import ModelRequest, ModelResponse

STREAM = Option("stream", "true or false", flag, True, "ConverseStream (true) or Converse")
REGION = Option[str | None](
    "region",
    "an AWS region (eu-west-1)",
    aws_region,
    None,
    "the region to call (default: AWS config)",
)
OPTIONS: tuple[Option[Any], ...] = (STREAM, REGION)


class BedrockProvider(DeclaredProvider):
    """Calls a Bedrock model with ConverseStream (or Converse) and returns one message."""

    prefix: ClassVar[str] = "bedrock"
    model_part: ClassVar[str] = "<model-id>"
    telemetry_name: ClassVar[str] = "aws.bedrock"
    options: ClassVar[tuple[Option[Any], ...]] = OPTIONS

    def __init__(self, spec: str, environ: Mapping[str, str] | None = None) -> None:
        """Create a provider for a model.

        Args:
            spec: the part of the model spec after ``bedrock:``: ``<model-id>`` optionally
                followed by ``?stream=false`` and/or ``region=<aws-region>``.
            environ: unused: boto3 reads the AWS configuration chain itself.

        Raises:
            ModelSpecError: the model id is empty or an option is unknown or invalid.
        """
        parsed = self.parse_spec(spec)
        self.model_id = parsed.name
        self.stream = parsed.get(STREAM)
        self.region = parsed.get(REGION)

    @classmethod
    def preflight(cls, parsed: ParsedSpec) -> None:
        """Refuse to start when boto3's standard chain finds no credentials here.

        Raises:
            ModelError: no AWS credentials.
        """
        import boto3  # type: ignore[import-untyped]  # only when bedrock: is asked for

        if boto3.session.Session().get_credentials() is None:
            raise ModelError(
                "no AWS credentials found for bedrock: configure a profile (AWS_PROFILE), "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or an instance role"
            )

    def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Send the conversation to Bedrock and assemble the assistant's answer.

        Blocking (boto3): the model activity runs it in a thread. See
        ``keel.activities.models.bedrock_calls.converse``.

        Raises:
            ModelError: a failure that retrying cannot fix.
            RetryableModelError: a transient failure (throttling, server error, broken stream).
        """
        from keel.activities.models import bedrock_calls

        return bedrock_calls.converse(self.model_id, self.stream, self.region, request, on_delta)

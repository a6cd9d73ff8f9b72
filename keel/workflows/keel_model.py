"""The base of Keel's own (non-Converse) types.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class KeelModel(BaseModel):
    """Base for Keel's own (non-Converse) types: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid")

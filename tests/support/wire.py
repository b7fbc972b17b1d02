"""What a request body is on the wire, for fakes of a service that receive the sender's model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def body_of(json: Any) -> Any:
    """A model as JSON-ready data (every field, as the receiving route sees it); anything else as is."""
    return json.model_dump(mode="json") if isinstance(json, BaseModel) else json

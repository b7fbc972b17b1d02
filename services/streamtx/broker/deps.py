"""Dependencies of the broker's routes, as ``Annotated`` aliases.

Async on purpose: FastAPI runs a sync dependency in a worker thread per request.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Request, Response
from pydantic import BaseModel, ValidationError

from streamtx.broker.broker import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.errors import MalformedError, UnavailableError


async def get_broker(request: Request) -> Broker:
    broker: Broker | None = getattr(request.app.state, "broker", None)
    if broker is None:
        raise UnavailableError("broker is starting")
    return broker


async def get_settings(request: Request) -> BrokerSettings:
    settings: BrokerSettings = request.app.state.settings
    return settings


BrokerDep = Annotated[Broker, Depends(get_broker)]
SettingsDep = Annotated[BrokerSettings, Depends(get_settings)]


def topic_name(tenant: str, namespace: str, topic: str) -> str:
    return f"persistent://{tenant}/{namespace}/{topic}"


M = TypeVar("M", bound=BaseModel)


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its body itself with :func:`parse_body`."""
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": model.model_json_schema()}}}}


async def parse_body(request: Request, model: type[M]) -> M:
    """The body validated straight from bytes (pydantic's own JSON parser), 400 when bad.

    Cheaper than FastAPI's body parameter (stdlib json, then validation of the Python
    objects) on the hot routes whose bodies hold thousands of message ids.
    """
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        details = "; ".join(
            ".".join(["body", *(str(p) for p in e.get("loc", ()))]) + f": {e.get('msg', '')}"
            for e in exc.errors()[:5]
        )
        raise MalformedError(details or "invalid request body") from None


def json_response(content: Any) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")

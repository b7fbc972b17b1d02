"""Each service's OpenAPI document as the service really answers (issue 21 item 13).

FastAPI documents a ``422`` on every operation with parameters, which no service ever
sends (validation errors are ``400 malformed``: service/errors.py), and none of the
errors the services do send. :func:`install_openapi` rewrites the document once, when
first asked for:

- every operation lists the error statuses it can answer with the API's error body
  (``{"error", "message"}``, docs/api.md): 400 when it takes parameters or a body,
  401, 403 and 404 unless its path is open to anyone,
  409 when it changes something, 413 when it takes a body, 503 (not ready, a dependency
  or the storage down), 307 on the services whose logs move between replicas, and
  whatever a route adds (``errors=`` of :func:`responses`); never 422;
- a path parameter named like one of :data:`PATH_SCHEMAS` (a tenant, a transaction id)
  carries the pattern its route enforces, so a request the schema allows is one the
  service accepts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from streamtx.auth.policy import OPEN_PATHS
from streamtx.contracts.txnid import TXN_ID_PATTERN, U64_PATTERN
from streamtx.names import NAME_PATTERN

__all__ = ["PATH_SCHEMAS", "install_openapi", "responses"]

#: Path parameters by name: the schema their routes enforce (streamtx.names, the txn id parser).
PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    **{name: {"type": "string", "pattern": NAME_PATTERN}
       for name in ("tenant", "namespace", "topic", "sub", "subscription", "name")},
    "txn": {"type": "string", "pattern": TXN_ID_PATTERN,
            "description": "transaction id '<most>:<least>', two unsigned 64-bit decimals"},
    **{name: {"type": "string", "pattern": U64_PATTERN} for name in ("most", "least")},
}

_ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string", "description": "the error's code (docs/api.md)"},
        "message": {"type": "string"},
        "owner": {"type": ["string", "null"], "description": "not_owner: the replica that owns it"},
    },
}
_REASONS = {
    307: "another replica owns it (`not_owner`): `Location` names it", 400: "malformed request or body",
    401: "no or bad credentials", 403: "credentials not allowed here", 404: "unknown",
    405: "the path exists, not with this method (`Allow` lists them)", 409: "conflict with the current state",
    413: "body or record too large", 429: "too many open (transactions, consumers): retry once some ended",
    503: "not ready, not the owner, or a dependency down: retry",
}
_KEY = "x-streamtx-errors"


def responses(*statuses: int) -> dict[str, Any]:
    """``openapi_extra`` of a route that answers ``statuses`` too (beyond the usual ones)."""
    return {_KEY: sorted(statuses)}


def _error_response(status: int) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": _REASONS.get(status, "error"),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if status == 307:
        answer["headers"] = {"Location": {"schema": {"type": "string"}, "description": "the owner's URL"}}
    return answer


def _statuses(path: str, method: str, op: dict[str, Any], moving: bool) -> set[int]:
    params = op.get("parameters", [])
    has_body = "requestBody" in op
    if path in OPEN_PATHS:
        return {503} if path == "/readyz" else set()
    found = {401, 403, 404, 503}  # 404: whatever it names (in the path, the query or the body) is unknown
    if params or has_body:
        found.add(400)
    if has_body:
        found.add(413)
    if method != "get":
        found.add(409)
    if moving:
        found.add(307)
    found.update(op.pop(_KEY, ()))
    return found


def rewrite(doc: dict[str, Any], *, moving: bool) -> dict[str, Any]:
    """``doc`` (FastAPI's) with the statuses and path patterns the service really has."""
    doc.setdefault("components", {}).setdefault("schemas", {})["Error"] = _ERROR
    doc["components"]["schemas"].pop("HTTPValidationError", None)
    doc["components"]["schemas"].pop("ValidationError", None)
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict):
                continue
            if "parameters" in op:  # once each: a router dependency and a hot route may both name {sub}
                op["parameters"] = list({(p.get("name"), p.get("in")): p for p in op["parameters"]}.values())
            for p in op.get("parameters", []):
                if p.get("in") == "path" and p.get("name") in PATH_SCHEMAS:
                    p["schema"] = dict(PATH_SCHEMAS[p["name"]])
            answers = op.setdefault("responses", {})
            answers.pop("422", None)
            for status in sorted(_statuses(path, method, op, moving)):
                answers.setdefault(str(status), _error_response(status))
    return doc


def install_openapi(app: FastAPI, *, moving: bool, extra: Iterable[str] = ()) -> None:
    """Serve the rewritten document (built once, on first request) at ``/openapi.json``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                              description=app.description)
            app.openapi_schema = rewrite(doc, moving=moving)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

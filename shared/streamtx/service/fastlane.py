"""The fast lane: a service's hottest routes, served ahead of FastAPI's per-request machinery.

Why: profiled under wrk (py-spy), FastAPI spends most of a small request's CPU
around the endpoint rather than in it: a linear route match over every route
(done twice, since the HTTP-metrics middleware matches again to name the
handler), dependency solving and query parsing even for an endpoint that takes
only the request, and three more middleware layers. Endpoints that already read
their body as bytes and answer bytes gain nothing from that. On the
coordinator's ``POST /v1/transactions`` it was three quarters of the CPU.

A hot route is declared once, with :class:`HotRoutes`, and served two ways:

- by FastAPI, as an ordinary route of an ``APIRouter``: OpenAPI documents it,
  and it answers whenever the lane is off (``STREAMTX_FAST_LANE=false``);
- by the :class:`FastLane` ASGI middleware, which matches the method and path
  against the few hot routes and calls the handler with path parameters, query
  string and body; every other request goes on to FastAPI untouched.

The contract is the same both ways: the handler answers 200 with JSON bytes; a
:class:`~streamtx.errors.StreamtxError` becomes the API's error body; requests
are counted by the app's HTTP-metrics functions under the route's template.
The lane also checks the bearer token of every request of the app, hot or not
(:mod:`streamtx.service.auth`), and hands the caller on in the scope.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request, Response
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator.metrics import Info
from pydantic import BaseModel, ValidationError
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from streamtx.auth.policy import Denial
from streamtx.auth.tokens import Principal
from streamtx.errors import MalformedError, reply_body
from streamtx.service.auth import PRINCIPAL, Authorize, principal_in
from streamtx.service.errors import Rendered, render, validation_message
from streamtx.service.longpoll import LongPoll, LongPolls
from streamtx.service.query import refuse_repeats

log = logging.getLogger(__name__)

Q = TypeVar("Q", bound=BaseModel)


@dataclass(slots=True)
class HotRequest:
    """What a hot handler gets: path parameters, the raw query string, the body, the app's state,
    the caller (None when auth is off).

    ``poll``: on a ``long_poll`` route, ended when the client goes away or the
    service stops (:mod:`streamtx.service.longpoll`). ``headers``: the request's raw
    headers; a handler that answers something other than JSON (the binary batch
    format) sets ``response_type``.
    """

    params: dict[str, str]
    query_string: bytes
    body: bytes
    state: State
    principal: Principal | None = None
    poll: LongPoll | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    response_type: str = "application/json"

    def header(self, name: str) -> str | None:
        """A request header's value (the first of that name), or None."""
        key = name.lower().encode("latin-1")
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    def json(self, model: type[Q]) -> Q:
        """The body validated straight from bytes by ``model`` (pydantic's JSON parser); 400 when bad."""
        try:
            return model.model_validate_json(self.body)
        except ValidationError as exc:
            raise MalformedError(_describe(exc, "body") or "invalid request body") from None

    def query(self, model: type[Q]) -> Q:
        """The query string validated by ``model`` (400 when it does not fit, or names one of its
        parameters twice: each takes one value)."""
        pairs = parse_qsl(self.query_string.decode("latin-1"), keep_blank_values=True)
        refuse_repeats(pairs, model.model_fields)
        try:
            return model.model_validate(dict(pairs))
        except ValidationError as exc:
            raise MalformedError(_describe(exc, "query")) from None


Handler = Callable[[HotRequest], Awaitable[bytes]]


def first_error(exc: ValidationError) -> str:
    """``loc: msg`` of a validation error's first complaint (for routes that check part of a body)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid"))


def _describe(exc: ValidationError, where: str) -> str:
    return validation_message(exc.errors(), where)


@dataclass(frozen=True, slots=True)
class HotRoute:
    """One hot route: method, full path template, its compiled pattern, the handler."""

    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Handler
    long_poll: bool = False


def compile_template(template: str) -> re.Pattern[str]:
    """``/v1/t/{name}/x`` -> a pattern with one named group per ``{param}`` (one path segment)."""
    out, pos = [], 0
    for m in re.finditer(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template):
        out.append(re.escape(template[pos:m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + r"\Z")


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` inlined where they are used.

    Pydantic's refs point at ``#/$defs/...`` inside the model's own schema; set
    into an OpenAPI document by hand (``openapi_extra``) they would point at the
    document's root, where nothing is (code generators and fuzzers skipped
    those bodies).
    """
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})

    def inline(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in seen:
                    raise ValueError(f"{model.__name__}: recursive schema {name} cannot be inlined")
                return inline({**defs[name], **{k: v for k, v in node.items() if k != "$ref"}},
                              (*seen, name))
            return {k: inline(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v, seen) for v in node]
        return node

    inlined: dict[str, Any] = inline(schema, ())
    return inlined


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI ``parameters`` for a query described by a pydantic model."""
    schema = inline_schema(model)
    required = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]


class HotRoutes:
    """Declares hot routes on an ``APIRouter`` and remembers them for the fast lane."""

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.routes: list[HotRoute] = []

    def post(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, **kwargs)

    def route(
        self, method: str, path: str, *, body: type[BaseModel] | None = None, body_required: bool = True,
        query: type[BaseModel] | None = None, long_poll: bool = False, **kwargs: Any,
    ) -> Callable[[Handler], Handler]:
        """Register ``handler`` for ``method path``; ``body``/``query`` models document the request.

        ``long_poll``: the handler may wait; it gets a :class:`LongPoll` in ``request.poll``.
        """
        extra: dict[str, Any] = dict(kwargs.pop("openapi_extra", None) or {})
        if body is not None:
            extra["requestBody"] = {"required": body_required,
                                    "content": {"application/json": {"schema": inline_schema(body)}}}
        template = self.router.prefix + path
        pattern = compile_template(template)
        # The endpoint takes only the request, so FastAPI documents no parameters itself.
        extra["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in pattern.groupindex
        ] + (query_parameters(query) if query is not None else [])

        def register(handler: Handler) -> Handler:
            async def endpoint(request: Request) -> Response:
                hot = HotRequest(dict(request.path_params), request.scope.get("query_string", b""),
                                 await request.body(), request.app.state, principal_in(request.scope),
                                 headers=list(request.scope.get("headers", ())))
                if not long_poll:
                    payload = await handler(hot)
                    return Response(payload, media_type=hot.response_type)
                polls: LongPolls = request.app.state.long_polls
                async with polls.open(request.receive) as hot.poll:
                    payload = await handler(hot)
                return Response(payload, media_type=hot.response_type)

            self.router.add_api_route(
                path, endpoint, methods=[method], name=handler.__name__,
                description=handler.__doc__ or "", openapi_extra=extra, **kwargs,
            )
            self.routes.append(HotRoute(method, template, pattern, handler, long_poll))
            return handler

        return register


Observe = Callable[[Scope, str, int, float], None]


@dataclass
class LaneTable:
    """The hot routes a :class:`FastLane` serves; filled as the service includes its routers."""

    enabled: bool = True
    by_method: dict[str, list[HotRoute]] = field(default_factory=dict)

    def add(self, routes: HotRoutes) -> None:
        for route in routes.routes:
            self.by_method.setdefault(route.method, []).append(route)

    def match(self, method: str, path: str) -> tuple[HotRoute, dict[str, str]] | None:
        for route in self.by_method.get(method, ()):
            if (m := route.pattern.match(path)) is not None:
                return route, m.groupdict()
        return None


class FastLane:
    """ASGI middleware: hot routes straight to their handlers, all else to the app behind."""

    def __init__(self, app: ASGIApp, *, table: LaneTable, state: State,
                 observe: Observe, authorize: Authorize | None) -> None:
        self.app = app
        self.table = table
        self.state = state
        self.polls: LongPolls = state.long_polls
        self.observe = observe
        self.authorize = authorize

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        principal = None
        if self.authorize is not None:
            # Every request of the app is checked here, hot or not: the rule lives in one place.
            verdict = self.authorize(scope["method"], scope["path"], _header(scope, b"authorization"))
            if type(verdict) is Denial:
                await _answer(send, verdict.status, reply_body(verdict.code, verdict.message))
                return
            if verdict is not None:
                principal = scope[PRINCIPAL] = verdict
        found = self.table.match(scope["method"], scope["path"]) if self.table.enabled else None
        if found is None:
            await self.app(scope, receive, send)
            return
        route, params = found
        start = time.perf_counter()
        answer = await self._serve(route, params, scope, receive, principal)  # type: ignore[arg-type]
        if answer is None:  # the client went away before its body arrived
            return
        status, payload, headers = answer
        await _answer(send, status, payload, headers)
        self.observe(scope, route.template, status, time.perf_counter() - start)

    async def _serve(self, route: HotRoute, params: dict[str, str], scope: Scope,
                     receive: Receive, principal: Principal | None) -> Rendered | None:
        chunks: list[bytes] = []
        try:
            while True:
                event = await receive()
                if event["type"] == "http.disconnect":
                    return None
                chunks.append(event.get("body", b""))
                if not event.get("more_body", False):
                    break
        except HTTPException as exc:  # the body limit (bodylimit.py) stopped the read
            return render(exc)
        request = HotRequest(params, scope.get("query_string", b""), b"".join(chunks), self.state, principal,
                             headers=scope["headers"])
        try:
            if route.long_poll:
                async with self.polls.open(receive) as request.poll:
                    payload = await route.handler(request)
            else:
                payload = await route.handler(request)
            if request.response_type == "application/json":
                return 200, payload, {}
            return 200, payload, {"content-type": request.response_type}
        except Exception as exc:
            query = scope.get("query_string", b"")
            return render(exc, scope["path"] + (f"?{query.decode('latin-1')}" if query else ""))


async def _answer(send: Send, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
    """Send one whole answer; JSON unless ``headers`` names another content type."""
    extra = headers or {}
    raw = [(b"content-type", extra.get("content-type", "application/json").encode("latin-1")),
           (b"content-length", b"%d" % len(payload))]
    raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items() if k != "content-type"]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _header(scope: Scope, name: bytes) -> str:
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def observer(instrumentator: Instrumentator) -> Observe:
    """Count a fast-lane request with the instrumentator's metric functions, labelled as it would."""
    instrumentations = instrumentator.instrumentations
    group = instrumentator.should_group_status_codes

    def observe(scope: Scope, template: str, status: int, duration: float) -> None:
        code = str(status)
        info = Info(request=Request(scope), response=None, method=scope["method"],
                    modified_handler=template, modified_status=code[0] + "xx" if group else code,
                    modified_duration=duration, modified_duration_without_streaming=duration)
        for instrumentation in instrumentations:
            instrumentation(info)

    return observe

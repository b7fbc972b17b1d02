"""A query parameter that takes one value, named more than once: 400 ``malformed``.

Why: FastAPI (and ``parse_qsl`` into a dict) silently keeps one of the values of
``?partition=1&partition=2``, so a request its OpenAPI document refuses (an array
where an integer is) was answered as if the caller had meant one of them (the
OpenAPI fuzz test's ST201). Every service checks it in two places: FastAPI's
routes through the app-wide dependency :func:`one_value_each`, the fast lane's
through :meth:`streamtx.service.fastlane.HotRequest.query` (:func:`refuse_repeats`).
"""

from __future__ import annotations

import types
from collections.abc import Collection, Iterable
from typing import Any, Union, get_args, get_origin

from fastapi import Request
from fastapi.dependencies.models import Dependant

from streamtx.errors import MalformedError

__all__ = ["one_value_each", "refuse_repeats"]


def refuse_repeats(pairs: Iterable[tuple[str, str]], single: Collection[str]) -> None:
    """400 when a name of ``single`` comes more than once among the query's ``pairs``."""
    seen: set[str] = set()
    for name, _ in pairs:
        if name in single:
            if name in seen:
                raise MalformedError(f"query parameter {name!r} takes one value: given more than once")
            seen.add(name)


def _takes_many(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return any(_takes_many(a) for a in get_args(annotation))
    kind = origin or annotation
    return isinstance(kind, type) and issubclass(kind, list | tuple | set | frozenset)


def _single_valued(dependant: Dependant) -> frozenset[str]:
    """The query parameters of a route (and of its dependencies) that take one value."""
    names: set[str] = set()
    todo = [dependant]
    while todo:
        d = todo.pop()
        names.update(f.alias for f in d.query_params if not _takes_many(f.field_info.annotation))
        todo.extend(d.dependencies)
    return frozenset(names)


async def one_value_each(request: Request) -> None:
    """App-wide dependency: a route's one-value query parameter named twice is a 400."""
    query: bytes = request.scope.get("query_string", b"")
    if b"&" not in query:  # one pair at most: nothing can repeat (most requests)
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if not isinstance(dependant, Dependant):
        return
    if single := _single_valued(dependant):
        refuse_repeats(request.query_params.multi_items(), single)

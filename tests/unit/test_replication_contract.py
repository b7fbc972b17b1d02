"""The replication API is one language: the broker's routes validate the contract models
(streamtx.contracts.replication) the controller builds, and every body model has one name."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import jsonschema
import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

import streamtx
from streamtx.broker.replication import routes, subscription_routes
from streamtx.contracts import replication
from streamtx.contracts.ackset import AckSet

BODIES = {"topics": "ReplicatedTopic", "cursor": "ReplicatorCursor",
          "cursor/delete": "ReplicatorCursorDelete",
          "read": "ReplicationRead", "ack": "ReplicatorAck", "write": "ReplicationWrite",
          "markers": "ReplicationMarker", "scan": "ReplicationScan",
          "subscriptions/update": "ReplicatedSubscriptionUpdate", "acks/export": "AckExport",
          "acks/apply": "AckApply"}


def test_each_internal_replication_call_takes_its_contract_model() -> None:
    taken = {}
    for route in [*routes.router.routes, *subscription_routes.router.routes]:
        assert isinstance(route, APIRoute)
        if "POST" in route.methods:
            body = typing.get_type_hints(route.endpoint)["body"]
            assert body.__module__ == replication.__name__, route.path
            taken[route.path.removeprefix("/v1/replication/")] = body.__name__
    assert taken == BODIES


def test_the_answers_the_controller_reads_are_contract_models_too() -> None:
    answers = {" ".join([*sorted(route.methods), route.path.removeprefix("/v1/replication/")]):
               route.response_model
               for route in [*routes.router.routes, *subscription_routes.router.routes]
               if isinstance(route, APIRoute) and route.response_model is not None
               and getattr(route.response_model, "__module__", "") == replication.__name__}
    assert {p: m.__name__ for p, m in answers.items()} == {
        "GET topics": "ReplicationTopics", "POST topics": "ReplicatedTopic", "POST scan": "ScannedMarkers",
        "POST acks/export": "ExportedAcks", "POST acks/apply": "AppliedAcks"}


def test_the_controller_builds_each_body_it_sends_from_the_contract() -> None:
    """No raw ``json={...}`` to the broker is left in the controller (it sent them all before)."""
    folder = Path(next(p for p in streamtx.__path__ if (Path(p) / "replication").is_dir())) / "replication"
    raw = [f"{path.name}:{node.lineno}" for path in folder.rglob("*.py")
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.keyword) and node.arg == "json" and isinstance(node.value, ast.Dict)]
    assert raw == []


def test_one_name_per_body_model() -> None:
    """There were two ``AckRequest`` (a client's ack, and the replicator's cursor move)."""
    seen: dict[str, list[str]] = {}
    modules: dict[str, Path] = {}
    for folder in streamtx.__path__:  # the first folder's module wins, as on import
        for path in Path(folder).rglob("*.py"):
            modules.setdefault(str(path.relative_to(folder)), path)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", ())]
            if isinstance(node, ast.ClassDef) and {"StrictBody", "BaseModel"} & set(bases):
                seen.setdefault(node.name, []).append(name)
    assert {n: p for n, p in seen.items() if len(p) > 1} == {}
    assert all(issubclass(getattr(replication, n), BaseModel) for n in BODIES.values())


def test_the_acks_schema_says_what_from_wire_accepts() -> None:
    """Issue 38: ``acks/apply`` refused ``origins: [{}]`` (400) though its schema said any
    object; ``acks/export`` refused ``after: "0"`` though its schema said any string."""
    origins = replication.AckApply.model_json_schema()["properties"]["origins"]
    valid = [[], [{"cluster": "b", "ledger": 1}], [{"cluster": "b", "ledger": 0, "ranges": [[1, 2]],
                                                    "batches": [[3, 4, "a"]], "more": "ignored"}]]
    invalid = [[{}], [{"cluster": "", "ledger": 1}], [{"cluster": "b"}], [{"cluster": "b", "ledger": -1}],
               [{"cluster": "b", "ledger": 1, "batches": [[3, 4, "0x1"]]}],
               [{"cluster": "b", "ledger": 1, "ranges": [[1]]}]]
    for body in valid:
        jsonschema.validate(body, origins)
        AckSet.from_wire(body)
    for body in invalid:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(body, origins)
        with pytest.raises(ValueError):
            AckSet.from_wire(body)
    for model in (replication.AckExport, replication.ReplicationScan):
        after = model.model_json_schema()["properties"]["after"]
        assert "pattern" in str(after), (model, after)  # a position, not any string
    start = replication.AckApply.model_json_schema()["properties"]["start"]
    assert "pattern" in str(start), start

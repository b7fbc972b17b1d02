"""Body schemas say what their routes check, so a schema-valid request is never refused (the
OpenAPI fuzz test's ST202s in CI: a replicated value, a publish time, a trim's message id)."""

from __future__ import annotations

import json

from streamtx.broker.routes.topics import TrimBody
from streamtx.contracts.body import BASE64_PATTERN
from streamtx.contracts.msgid import MESSAGE_ID_PATTERN
from streamtx.contracts.replication import ReplicatedEntry, ReplicatedMessage


def test_replicated_values_and_publish_times_carry_their_checks() -> None:
    assert ReplicatedMessage.model_json_schema()["properties"]["value"]["pattern"] == BASE64_PATTERN
    # A bound a double holds exactly: JSON Schema readers turned 2**63 into a valid 2**63.
    assert ReplicatedEntry.model_json_schema()["properties"]["publish_time"]["maximum"] == 2**53


def test_a_trims_before_is_a_message_id() -> None:
    assert MESSAGE_ID_PATTERN in json.dumps(TrimBody.model_json_schema()["properties"]["before"])

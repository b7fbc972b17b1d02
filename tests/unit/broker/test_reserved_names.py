"""Reserved producer and subscription names (issue 21 item 3), decided without HTTP."""

from __future__ import annotations

import pytest

from streamtx.auth import Principal
from streamtx.broker.deps import check_client_name
from streamtx.broker.replication.state import cursor_name, producer_name
from streamtx.errors import ForbiddenError
from streamtx.names import is_reserved

CLIENT = Principal("app", frozenset({"client"}), frozenset({"t"}))
SERVICE = Principal("svc", frozenset({"service"}), None)
ADMIN = Principal("ops", frozenset({"admin"}), None)


def test_the_services_own_names_are_reserved() -> None:
    assert is_reserved(cursor_name("east")) and is_reserved(producer_name("east"))
    assert not is_reserved("pulsar-app") and not is_reserved("my.pulsar.repl.east")


@pytest.mark.parametrize("principal", [CLIENT, None])  # None: auth off
def test_clients_and_anonymous_callers_are_refused(principal: Principal | None) -> None:
    for kind in ("producer", "subscription"):
        with pytest.raises(ForbiddenError):
            check_client_name(kind, "pulsar.repl.east", principal)
        check_client_name(kind, "orders", principal)


def test_services_and_admins_may() -> None:
    for principal in (SERVICE, ADMIN):
        check_client_name("producer", "pulsar.repl.east", principal)

"""Dependency aliases, so route signatures read like type lists."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.coordinator.txnid import TxnId


def get_coordinators(request: Request) -> Coordinators:
    coordinators: Coordinators = request.app.state.coordinators
    return coordinators


def get_settings(request: Request) -> CoordinatorSettings:
    settings: CoordinatorSettings = request.app.state.settings
    return settings


def txn_from_path(txn: str) -> TxnId:
    """The ``{txn}`` path parameter, ``"{most}:{least}"``; 400 when malformed."""
    return TxnId.parse(txn)


CoordinatorsDep = Annotated[Coordinators, Depends(get_coordinators)]
SettingsDep = Annotated[CoordinatorSettings, Depends(get_settings)]
TxnPath = Annotated[TxnId, Depends(txn_from_path)]

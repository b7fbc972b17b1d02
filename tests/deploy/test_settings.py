"""Every STREAMTX_* setting a service reads is settable in the chart, and compose sets only real ones.

The settings are walked from each service's pydantic settings class (nested
models such as ``batching`` give ``STREAMTX_BATCHING__MAX_RECORDS`` and co), so
a setting added later fails here until the chart carries it: either the chart
sets it itself (ConfigMap, the StatefulSet's env) or ``components.<service>.env``
in values.yaml lists it at the code's default; or it is in :data:`NOT_IN_CHART`,
which says why not.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic_settings import BaseSettings

from streamtx.broker.settings import BrokerSettings
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.replication.settings import ReplicationSettings
from tests.deploy.test_chart import ROOT, render, values

SETTINGS: dict[str, type[BaseSettings]] = {
    "coordinator": CoordinatorSettings, "broker": BrokerSettings, "pendingack": PendingAckSettings,
    "replication": ReplicationSettings,
}

#: Settings the chart does not carry, and why (service None: every service).
NOT_IN_CHART: dict[tuple[str | None, str], str] = {
    # Set per process by the worker launcher (service/workers.py), never by an operator.
    (None, "STREAMTX_WORKER_INDEX"): "the launcher's",
    # Alternatives to auth.jwtSecret for RS256 JWTs: a PEM key (or a file the operator
    # mounts) passed through env from the operator's own Secret or volume.
    (None, "STREAMTX_AUTH_JWT_PUBLIC_KEY"): "operator's secret",
    (None, "STREAMTX_AUTH_JWT_PUBLIC_KEY_FILE"): "operator's mount",
    # A credential for other clusters' brokers: from the operator's own Secret (env valueFrom).
    ("replication", "STREAMTX_REMOTE_TOKEN"): "operator's secret",
    # One process per port: only the coordinator runs several workers (the others refuse > 1).
    ("broker", "STREAMTX_WORKERS"): "coordinator only",
    ("pendingack", "STREAMTX_WORKERS"): "coordinator only",
    ("replication", "STREAMTX_WORKERS"): "coordinator only",
}


def env_vars(cls: type[BaseModel], prefix: str = "STREAMTX_") -> dict[str, Any]:
    """Every environment variable of a settings class, with its default."""
    out: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and not issubclass(ann, BaseSettings):
            out.update(env_vars(ann, f"{prefix}{name.upper()}__"))
        else:
            out[f"{prefix}{name.upper()}"] = field.get_default(call_default_factory=True)
    return out


def _not_in_chart(service: str) -> set[str]:
    return {var for (svc, var) in NOT_IN_CHART if svc in (None, service)}


def _rendered_env(service: str) -> set[str]:
    """What the chart gives the service's container: its ConfigMap and its env (Redis on, so the
    coordinator's Redis URL is there too)."""
    docs = render("defaults", ("components.redis.enabled=true",))
    (settings,) = [d for d in docs
                   if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings")]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"
              and d["metadata"]["labels"]["app.kubernetes.io/component"] == service]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return set(settings["data"]) | {e["name"] for e in container["env"]}


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_every_setting_is_in_the_chart(service: str) -> None:
    wanted = set(env_vars(SETTINGS[service])) - _not_in_chart(service)
    missing = wanted - _rendered_env(service)
    assert not missing, f"{service}: add these to components.{service}.env in values.yaml (or to " \
                        f"NOT_IN_CHART with the reason): {sorted(missing)}"


def test_the_allow_list_names_real_settings() -> None:
    for (service, var) in NOT_IN_CHART:
        for svc in [service] if service else list(SETTINGS):
            assert var in env_vars(SETTINGS[svc]), (svc, var)


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_chart_lists_settings_at_the_code_defaults(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """values.yaml's env names only real settings, at their defaults: the chart changes nothing."""
    listed: dict[str, str] = values("defaults")["components"][service]["env"]
    known = env_vars(SETTINGS[service])
    assert set(listed) <= set(known), sorted(set(listed) - set(known))
    for var in list(known):
        monkeypatch.delenv(var, raising=False)
    defaults = SETTINGS[service]().model_dump()
    for var, value in listed.items():
        monkeypatch.setenv(var, value)
    assert SETTINGS[service]().model_dump() == defaults


def test_compose_sets_only_real_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for service, cls in SETTINGS.items():
        env = compose["services"][service]["environment"]
        unknown = {k for k in env if k.startswith("STREAMTX_")} - set(env_vars(cls))
        assert not unknown, f"{service}: {sorted(unknown)}"
    assert compose["services"]["broker"]["environment"]["STREAMTX_FAILOVER_IDLE_MS"]

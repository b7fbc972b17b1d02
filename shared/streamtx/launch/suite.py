"""`make run`: start the whole suite locally on embedded defaults.

Every service runs as its own process (as in production), with file ledgers
under one data directory. URLs are printed; Ctrl-C stops everything cleanly.
A second installation on the same machine is another cluster:
``python -m streamtx.launch.suite --cluster b --base-port 18100 --data-dir data/b``
(ports from the base up: coordinator, broker, pending-ack store, replication).

The documented ``STREAMTX_*`` settings in the environment are honoured, or refused
before anything starts with a line saying why (they were once silently overridden):

- ``STREAMTX_LEDGER_URL``: the ledgers' backend (``--ledger-url`` wins over it);
  ``memory://`` is refused (each process would have ledgers of its own).
- ``STREAMTX_WORKERS``: the coordinator's worker processes (the only service that
  runs several); more than 1 needs ``STREAMTX_REDIS_URL``.
- auth (docs/security.md): ``STREAMTX_AUTH_JWT_SECRET`` alone turns it on for every
  service, each signing its own service credential with it; a secret under 32 bytes,
  or auth on with no credential for the services' calls to each other, is refused.
- ``STREAMTX_HOST`` is ``--host``'s default. ``STREAMTX_PORT``, the services' URLs
  and ``STREAMTX_ADVERTISED_URL`` are one per service, so make run sets them and
  refuses them from the environment (``BASE_PORT`` moves the ports).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from streamtx.launch.children import Children
from streamtx.service.readiness import wait_ready
from streamtx.service.run import settings_errors
from streamtx.service.settings import ServiceSettings

# Port offsets from --base-port. Start order matters: participants before the
# coordinator that recovers into them; replication needs the broker.
SERVICES = [("broker", 1), ("pendingack", 2), ("coordinator", 0), ("replication", 3)]
DEFAULT_BASE_PORT = 8081
#: The one service that runs several worker processes on its port (its ids are leased).
WORKERS_SERVICE = "coordinator"
#: Settings that differ per service: make run sets them, so one in the environment is refused.
PER_SERVICE = ("STREAMTX_PORT", "STREAMTX_ADVERTISED_URL",
               *(f"STREAMTX_{name.upper()}_URL" for name, _ in SERVICES))


class Refused(Exception):
    """A setting make run cannot honour; the message says which and what to do instead."""


def _available(base_port: int) -> list[tuple[str, int]]:
    return [(n, base_port + off) for n, off in SERVICES if importlib.util.find_spec(f"streamtx.{n}.__main__")]


def ledger_url(args: argparse.Namespace, environ: Mapping[str, str], data: Path) -> str:
    """``--ledger-url``, else ``STREAMTX_LEDGER_URL``, else file ledgers under the data directory."""
    url = args.ledger_url or environ.get("STREAMTX_LEDGER_URL") or f"file://{data / 'ledgers'}"
    if url.startswith("memory://"):
        raise Refused(f"ledger URL {url}: memory ledgers live in one process, and make run's services are "
                      "four; use file://DIR or kafka://HOST:PORT")
    return url


def child_envs(args: argparse.Namespace, environ: Mapping[str, str], services: list[tuple[str, int]],
               data: Path) -> dict[str, dict[str, str]]:
    """Each service's environment: ``environ`` with the suite's settings, checked (:class:`Refused`)."""
    given = [k for k in PER_SERVICE if environ.get(k)]
    if given:
        raise Refused(f"{', '.join(given)}: make run gives each service its own port and URL (from "
                      "BASE_PORT, --base-port); unset it, or start that service alone "
                      "(python -m streamtx.<service>)")
    urls = {name: f"http://{args.host}:{port}" for name, port in services}
    common = {
        **environ,
        "STREAMTX_LEDGER_URL": ledger_url(args, environ, data),
        **{f"STREAMTX_{name.upper()}_URL": url for name, url in urls.items()},
        **({"STREAMTX_CLUSTER": args.cluster} if args.cluster else {}),
        "STREAMTX_HOST": args.host,
    }
    workers = environ.get("STREAMTX_WORKERS", "").strip()
    if workers not in ("", "1"):
        if not environ.get("STREAMTX_REDIS_URL"):
            raise Refused(f"STREAMTX_WORKERS={workers}: the coordinator's workers share its ids through "
                          "Redis; set STREAMTX_REDIS_URL too (redis-server --port 6379 --daemonize yes; "
                          "STREAMTX_REDIS_URL=redis://127.0.0.1:6379/0), docs/scaling.md")
        common.pop("STREAMTX_WORKERS")  # only the coordinator takes it; the others would refuse it
    envs = {name: {**common, "STREAMTX_PORT": str(port),
                   **({"STREAMTX_WORKERS": workers} if workers and name == WORKERS_SERVICE else {})}
            for name, port in services}
    for env in envs.values():
        check(env)
    return envs


def check(env: Mapping[str, str]) -> None:
    """Refuse what every service would refuse at its start (bad settings, half-set-up auth), at once.

    The common settings only: ``workers`` is the coordinator's own to check.
    """
    given = {field: env[key] for field in ServiceSettings.model_fields
             if field != "workers" and (key := f"STREAMTX_{field.upper()}") in env}
    try:
        settings = ServiceSettings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = settings_errors("suite", ServiceSettings, exc)
        raise Refused("; ".join(line.removeprefix("streamtx suite: ") for line in lines)) from None
    if problem := settings.peer_credential_problem():
        raise Refused(problem)


def auth_line(env: Mapping[str, str]) -> str:
    """What the suite's auth is, for its last lines (never a secret)."""
    if env.get("STREAMTX_AUTH_JWT_SECRET") and not (env.get("STREAMTX_SERVICE_TOKEN")
                                                     or env.get("STREAMTX_ADMIN_TOKEN")):
        return ("auth on (STREAMTX_AUTH_JWT_SECRET; the services sign their own credential with it): "
                "calls need a token, `streamtx-admin token create` makes one (docs/security.md)")
    on = [k for k in ("STREAMTX_AUTH_JWT_SECRET", "STREAMTX_AUTH_JWT_PUBLIC_KEY",
                      "STREAMTX_AUTH_JWT_PUBLIC_KEY_FILE", "STREAMTX_ADMIN_TOKEN", "STREAMTX_CLIENT_TOKEN",
                      "STREAMTX_SERVICE_TOKEN") if env.get(k)]
    if on:
        return f"auth on ({', '.join(on)}): calls need a token (docs/security.md)"
    return "auth off (STREAMTX_AUTH_JWT_SECRET turns it on: docs/security.md)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="streamtx suite", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="data", help="where the file ledgers live")
    parser.add_argument("--host", default=os.environ.get("STREAMTX_HOST") or "127.0.0.1",
                        help="the services' address ($STREAMTX_HOST, else 127.0.0.1)")
    parser.add_argument("--ledger-url", default=None,
                        help="e.g. kafka://127.0.0.1:9092 (default: $STREAMTX_LEDGER_URL, "
                        "else DATA_DIR's files)")
    parser.add_argument("--cluster", default=None, help="this installation's cluster name (STREAMTX_CLUSTER)")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                        help=f"first port; the services take the next ones ({DEFAULT_BASE_PORT})")
    args = parser.parse_args(argv)

    services = _available(args.base_port)
    data = Path(args.data_dir).resolve()
    try:
        envs = child_envs(args, os.environ, services, data)
    except Refused as exc:
        sys.exit(f"streamtx: not starting: {exc}")
    data.mkdir(parents=True, exist_ok=True)
    children = Children("streamtx")
    children.on_signals()
    for name, _ in services:
        url = envs[name][f"STREAMTX_{name.upper()}_URL"]
        proc = children.start(name, [sys.executable, "-m", f"streamtx.{name}"], envs[name])
        try:
            wait_ready(url, proc, timeout_s=30)
        except (RuntimeError, TimeoutError) as exc:
            children.fail(f"{name}: {exc}")
        workers = envs[name].get("STREAMTX_WORKERS")
        children.say(f"{name:<12} {url}  (docs: {url}/docs)" + (f", {workers} workers" if workers else ""))
    first = envs[services[0][0]]
    cluster = args.cluster or first.get("STREAMTX_CLUSTER", "standalone")
    children.say(auth_line(first))
    children.say(f"cluster {cluster}; ledgers in {first['STREAMTX_LEDGER_URL']}; Ctrl-C stops")
    children.watch()

if __name__ == "__main__":
    main()

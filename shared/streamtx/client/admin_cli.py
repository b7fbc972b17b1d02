"""``streamtx-admin``: the admin API from the shell; every command prints JSON.

    streamtx-admin [--url URL] [--token TOKEN] topics create persistent://t/n/x --partitions 3
    streamtx-admin topics get persistent://t/n/x
    streamtx-admin coordinator stats | coordinator internal-stats 0
    streamtx-admin txn metadata 0:17 | txn violations | slow txns 10000
    streamtx-admin tc-batch-log set --enable true | tc-batch-log get
    streamtx-admin pending-ack-batch-log set --enable false | pending-ack-batch-log get
    streamtx-admin buffer stats persistent://t/n/x-partition-0
    streamtx-admin pending-ack stats persistent://t/n/x sub [--internal]
    streamtx-admin token create --subject app1 --role client --tenant a [--expires-in-s 86400]
    streamtx-admin ledger check DATA_DIR [--ledger NAME ...]
    streamtx-admin ledger repair DATA_DIR (--ledger NAME ... | --all) [--truncate]
    streamtx-admin clusters put b --service-url http://127.0.0.1:18101 | clusters get b | clusters list
    streamtx-admin namespaces set-replication t/n --clusters a,b,c | namespaces get-replication t/n
    streamtx-admin topics set-replication persistent://t/n/x --clusters a,b | topics get-replication ...
    streamtx-admin topics stats persistent://t/n/x

``--url`` (or ``STREAMTX_URL``) is any service's URL; the others are found
through ``/v1/cluster``. ``--token`` (or ``STREAMTX_ADMIN_TOKEN``) is the
admin bearer token. Errors print ``{"error", "message"}`` and exit with 1.

``token create`` calls no service: it signs a JWT with the HS256 secret in
``STREAMTX_AUTH_JWT_SECRET`` (the services' setting of the same name), or with
the RS256 private key in ``--private-key-file`` (the services then hold only
the public key).

``ledger`` works on the files of the file ledger backend (``DATA_DIR`` is the
directory of ``file://DATA_DIR``), not through a service: ``check`` reports torn
tails and corruption of every ledger (or the ``--ledger`` names), ``repair``
fixes what it can (see :mod:`streamtx.ledger.filecheck`); both exit with 2 when
something is (left) damaged, and with 1 when ``DATA_DIR`` holds no ledger (`make
run` keeps them in ``<data dir>/ledgers``). Run ``repair`` while the services are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from streamtx.auth.tokens import ROLES, issue
from streamtx.client.admin import AdminClient
from streamtx.client.client import StreamtxClient
from streamtx.errors import LedgerError, MalformedError, StreamtxError

Command = Callable[[AdminClient, argparse.Namespace], Awaitable[Any]]


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("at least one cluster name")
    return names


def _group(sub: Any, name: str, help: str) -> Any:
    return sub.add_parser(name, help=help).add_subparsers(dest="action", required=True)


def _add(group: Any, name: str, help: str, run: Command) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(name, help=help)
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamtx-admin", description="streamtx admin API")
    parser.add_argument("--url", default=os.environ.get("STREAMTX_URL", "http://127.0.0.1:8081"),
                        help="any service's base URL (default $STREAMTX_URL or the local coordinator)")
    parser.add_argument("--token", default=os.environ.get("STREAMTX_ADMIN_TOKEN"), help="admin token")
    sub = parser.add_subparsers(dest="command", required=True)

    topics = _group(sub, "topics", "partitioned topics")
    p = _add(topics, "create", "create a partitioned topic",
             lambda a, ns: a.create_topic(ns.topic, ns.partitions))
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, required=True)
    _add(topics, "get", "partition count", lambda a, ns: a.get_topic(ns.topic)).add_argument("topic")
    _add(topics, "stats", "topic stats (with replication per remote cluster)",
         lambda a, ns: a.topic_stats(ns.topic)).add_argument("topic")
    p = _add(topics, "set-replication", "the clusters a topic replicates to (overrides its namespace's)",
             lambda a, ns: a.set_topic_replication(ns.topic, ns.clusters))
    p.add_argument("topic")
    p.add_argument("--clusters", type=_names, required=True, help="comma-separated cluster names")
    _add(topics, "get-replication", "a topic's own replication clusters",
         lambda a, ns: a.get_topic_replication(ns.topic)).add_argument("topic")

    clusters = _group(sub, "clusters", "geo-replication peers")
    _add(clusters, "list", "every cluster this one knows", lambda a, ns: a.list_clusters())
    _add(clusters, "get", "a registered cluster", lambda a, ns: a.get_cluster(ns.name)).add_argument("name")
    p = _add(clusters, "put", "register a peer cluster by any service URL of it",
             lambda a, ns: a.put_cluster(ns.name, ns.service_url))
    p.add_argument("name")
    p.add_argument("--service-url", required=True)
    _add(clusters, "delete", "forget a peer", lambda a, ns: a.delete_cluster(ns.name)).add_argument("name")

    namespaces = _group(sub, "namespaces", "namespace policies")
    p = _add(namespaces, "set-replication", "the clusters a namespace replicates to",
             lambda a, ns: a.set_namespace_replication(ns.namespace, ns.clusters))
    p.add_argument("namespace", help="tenant/namespace")
    p.add_argument("--clusters", type=_names, required=True, help="comma-separated cluster names")
    _add(namespaces, "get-replication", "a namespace's replication clusters",
         lambda a, ns: a.get_namespace_replication(ns.namespace)).add_argument("namespace")

    coordinator = _group(sub, "coordinator", "transaction coordinators")
    _add(coordinator, "stats", "coordinatorStats", lambda a, ns: a.coordinator_stats())
    _add(coordinator, "internal-stats", "coordinatorInternalStats",
         lambda a, ns: a.coordinator_internal_stats(ns.coordinator_id)).add_argument(
        "coordinator_id", type=int)

    txn = _group(sub, "txn", "transactions")
    _add(txn, "metadata", "transactionMetadata",
         lambda a, ns: a.transaction_metadata(ns.txn_id)).add_argument("txn_id", help="most:least")
    _add(txn, "violations", "protocolViolations: txns a participant ended the other way",
         lambda a, ns: a.protocol_violations())
    slow = _group(sub, "slow", "slow transactions")
    _add(slow, "txns", "open transactions older than TIMEOUT_MS",
         lambda a, ns: a.slow_transactions(ns.timeout_ms)).add_argument("timeout_ms", type=int)

    tc = _group(sub, "tc-batch-log", "batched transaction-log writes")
    _add(tc, "set", "switch on or off", lambda a, ns: a.set_tc_batch_log(ns.enable)).add_argument(
        "--enable", type=_bool, required=True)
    _add(tc, "get", "the switch and each coordinator's state", lambda a, ns: a.get_tc_batch_log())
    pa = _group(sub, "pending-ack-batch-log", "batched pending-ack log writes")
    _add(pa, "set", "switch on or off", lambda a, ns: a.set_pending_ack_batch_log(ns.enable)).add_argument(
        "--enable", type=_bool, required=True)
    _add(pa, "get", "the switch and each subscription's state", lambda a, ns: a.get_pending_ack_batch_log())

    buffer = _group(sub, "buffer", "transaction buffers")
    _add(buffer, "stats", "transactionBufferStats of a partition",
         lambda a, ns: a.buffer_stats(ns.topic)).add_argument("topic")

    pending = _group(sub, "pending-ack", "pending-ack stores")
    p = _add(pending, "stats", "pendingAckStats (or --internal: pendingAckInternalStats)",
             lambda a, ns: (a.pending_ack_internal_stats if ns.internal else a.pending_ack_stats)(
                 ns.topic, ns.subscription))
    p.add_argument("topic")
    p.add_argument("subscription")
    p.add_argument("--internal", action="store_true")

    token = _group(sub, "token", "signed bearer tokens (offline: no service is called)")
    p = token.add_parser("create", help="issue a JWT")
    p.set_defaults(offline=create_token)
    p.add_argument("--subject", required=True, help="who the token is for (owner of its transactions)")
    p.add_argument("--role", action="append", choices=ROLES, required=True, help="repeatable")
    p.add_argument("--tenant", action="append", default=[], help="repeatable; '*' for every tenant")
    p.add_argument("--expires-in-s", type=float, default=None,
                   help="default: never expires (the services accept it up to 5 s past expiry: clock skew)")
    p.add_argument("--private-key-file", default=None, help="RS256 PEM private key (default: HS256 with "
                   "$STREAMTX_AUTH_JWT_SECRET)")

    ledger = _group(sub, "ledger", "file ledger segments (offline)")
    for name, help in (("check", "report torn tails and corruption"), ("repair", "repair what can be")):
        p = ledger.add_parser(name, help=help)
        p.set_defaults(offline=_ledger_command)
        p.add_argument("data_dir", help="the file backend's directory (file://DATA_DIR)")
        p.add_argument("--ledger", action="append", default=[], help="a ledger name (repeatable)")
        if name == "repair":
            p.add_argument("--all", action="store_true", help="every ledger under DATA_DIR")
            p.add_argument("--truncate", action="store_true",
                           help="also cut the last segment at corruption (drops every entry after it)")
    return parser


def create_token(ns: argparse.Namespace) -> dict[str, Any]:
    """A signed token and what it carries."""
    if "client" in ns.role and not ns.tenant:
        # It would reach no tenant at all: every client call 403, and nothing said why.
        raise MalformedError("a token with the client role needs --tenant NAME (repeatable; '*' for every "
                             "tenant): without one it may touch no tenant")
    if ns.private_key_file:
        with open(ns.private_key_file) as f:
            key, algorithm = f.read(), "RS256"
    else:
        key, algorithm = os.environ.get("STREAMTX_AUTH_JWT_SECRET", ""), "HS256"
        if not key:
            raise ValueError("set STREAMTX_AUTH_JWT_SECRET or pass --private-key-file")
    token = issue(key, subject=ns.subject, roles=ns.role, tenants=ns.tenant,
                  expires_in_s=ns.expires_in_s, algorithm=algorithm)
    return {"token": token, "subject": ns.subject, "roles": ns.role, "tenants": ns.tenant,
            "algorithm": algorithm}



def _ledger_command(ns: argparse.Namespace) -> dict[str, Any]:
    # Imported here: the admin API commands need no ledger code.
    from streamtx.ledger import filecheck, segment, where

    root = ns.data_dir.removeprefix("file://")
    if ns.action == "repair" and not ns.ledger and not ns.all:
        raise MalformedError("repair needs --ledger NAME (repeatable) or --all")
    dirs = ([os.path.join(root, segment.ledger_dir_name(n)) for n in ns.ledger] if ns.ledger
            else where.ledger_dirs(root))
    if not os.path.isdir(root) or not dirs:  # a check of nothing is no "clean"
        command = f"streamtx-admin ledger {ns.action}"
        raise MalformedError(where.explain_empty(root, lambda nested: f"{command} {nested}"))
    try:
        if ns.action == "check":
            reports = [filecheck.check_ledger(d) for d in dirs]
            ok = all(r.clean for r in reports)
        else:
            reports = [filecheck.repair_ledger(d, truncate=ns.truncate) for d in dirs]
            ok = not any(r.refused for r in reports)
    except OSError as exc:
        raise LedgerError(f"ledger files under {root}: {exc}") from exc
    ns.exit_status = 0 if ok else 2
    return {"ledgers": [{"name": segment.ledger_name_of(os.path.basename(r.directory)), **r.as_json()}
                        for r in reports], "clean": ok}


async def run(argv: Sequence[str] | None = None) -> int:
    """Parse, call, print; the exit status."""
    ns = build_parser().parse_args(argv)
    if (offline := getattr(ns, "offline", None)) is not None:
        try:
            print(json.dumps(offline(ns), indent=2, sort_keys=True))
        except StreamtxError as exc:
            print(json.dumps({"error": exc.code, "message": exc.message}), file=sys.stderr)
            return 1
        except (ValueError, OSError) as exc:
            print(json.dumps({"error": "malformed", "message": str(exc)}), file=sys.stderr)
            return 1
        return int(getattr(ns, "exit_status", 0))
    try:
        async with StreamtxClient(ns.url, token=ns.token) as client:
            result = await ns.run(AdminClient(client), ns)
    except StreamtxError as exc:
        print(json.dumps({"error": exc.code, "message": exc.message}), file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(asyncio.run(run(argv)))


if __name__ == "__main__":
    main()

"""`make run-geo`: three connected clusters ``a``, ``b``, ``c`` on this machine, on embedded defaults.

Each cluster is one ``python -m streamtx.launch.suite --cluster X --base-port P
--data-dir DIR/X`` (P: ``--base-port``, 18000 by default, then +100 and +200;
``make run-geo BASE_PORT=...``); once all answer, each registers the other two as peers
(``PUT /admin/v2/clusters/{name}``), so a namespace or topic given a
replication list (``POST .../replication``) in a cluster replicates from there.
URLs are printed; Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import httpx

from streamtx.launch.children import Children
from streamtx.service.readiness import wait_ready

DEFAULT_BASE_PORT = 18000


def clusters(base_port: int = DEFAULT_BASE_PORT) -> dict[str, int]:
    """name -> base port (coordinator; broker +1, pending-ack +2, replication +3)."""
    return {name: base_port + 100 * i for i, name in enumerate("abc")}


CLUSTERS = clusters()


def broker_url(base_port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{base_port + 1}"


def connect(clusters: dict[str, int], host: str = "127.0.0.1", token: str | None = None) -> None:
    """Register every cluster as a peer of every other (through each one's broker)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    for name, port in clusters.items():
        for peer, peer_port in clusters.items():
            if peer == name:
                continue
            r = httpx.put(f"{broker_url(port, host)}/admin/v2/clusters/{peer}", headers=headers, timeout=30,
                          json={"service_url": broker_url(peer_port, host)})
            r.raise_for_status()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="data", help="cluster X keeps its ledgers in DATA_DIR/X")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                        help=f"cluster a's first port; b and c take the next hundreds ({DEFAULT_BASE_PORT})")
    args = parser.parse_args(argv)
    if not 0 < args.base_port <= 65535 - 203:
        parser.error(f"--base-port {args.base_port}: the three clusters need ports up to base + 203")
    ports = clusters(args.base_port)
    children = Children("streamtx-geo", grace_s=20)
    children.on_signals()
    procs = []
    for name, port in ports.items():
        cmd = [sys.executable, "-m", "streamtx.launch.suite", "--cluster", name, "--base-port", str(port),
               "--data-dir", str(Path(args.data_dir) / name), "--host", args.host]
        procs.append(children.start(f"cluster {name}", cmd, {**os.environ}))
    try:
        for port, proc in zip(ports.values(), procs, strict=True):
            wait_ready(f"http://{args.host}:{port + 3}", proc, timeout_s=120)
        connect(ports, args.host, os.environ.get("STREAMTX_ADMIN_TOKEN"))
    except (RuntimeError, TimeoutError, httpx.HTTPError) as exc:
        children.fail(str(exc))
    for name, port in ports.items():
        children.say(f"cluster {name}: broker {broker_url(port, args.host)} "
                     f"(any service URL works: {args.host}:{port}..{port + 3})")
    children.say("clusters a, b, c know each other; set a replication list to replicate; Ctrl-C stops")
    children.watch()

if __name__ == "__main__":
    main()

"""`make run`: start the whole suite locally on embedded defaults.

Every service runs as its own process (as in production), with file ledgers
under one data directory. URLs are printed; Ctrl-C stops everything cleanly.
A second installation on the same machine is another cluster:
``python -m streamtx.launch.suite --cluster b --base-port 18100 --data-dir data/b``
(ports from the base up: coordinator, broker, pending-ack store, replication).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from streamtx.launch.children import Children
from streamtx.service.readiness import wait_ready

# Port offsets from --base-port. Start order matters: participants before the
# coordinator that recovers into them; replication needs the broker.
SERVICES = [("broker", 1), ("pendingack", 2), ("coordinator", 0), ("replication", 3)]
DEFAULT_BASE_PORT = 8081


def _available(base_port: int) -> list[tuple[str, int]]:
    return [(n, base_port + off) for n, off in SERVICES if importlib.util.find_spec(f"streamtx.{n}.__main__")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="streamtx suite", description=__doc__)
    parser.add_argument("--data-dir", default="data", help="where the file ledgers live")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ledger-url", default=None, help="override, e.g. kafka://127.0.0.1:9092")
    parser.add_argument("--cluster", default=None, help="this installation's cluster name (STREAMTX_CLUSTER)")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT,
                        help=f"first port; the services take the next ones ({DEFAULT_BASE_PORT})")
    args = parser.parse_args(argv)

    services = _available(args.base_port)
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    urls = {name: f"http://{args.host}:{port}" for name, port in services}
    common = {
        "STREAMTX_LEDGER_URL": args.ledger_url or f"file://{data / 'ledgers'}",
        **{f"STREAMTX_{name.upper()}_URL": url for name, url in urls.items()},
        **({"STREAMTX_CLUSTER": args.cluster} if args.cluster else {}),
    }
    children = Children("streamtx")
    children.on_signals()
    for name, port in services:
        env = {**os.environ, **common, "STREAMTX_HOST": args.host, "STREAMTX_PORT": str(port)}
        proc = children.start(name, [sys.executable, "-m", f"streamtx.{name}"], env)
        try:
            wait_ready(urls[name], proc, timeout_s=30)
        except (RuntimeError, TimeoutError) as exc:
            children.fail(f"{name}: {exc}")
        children.say(f"{name:<12} {urls[name]}  (docs: {urls[name]}/docs)")
    cluster = args.cluster or os.environ.get("STREAMTX_CLUSTER", "standalone")
    children.say(f"cluster {cluster}; ledgers in {common['STREAMTX_LEDGER_URL']}; Ctrl-C stops")
    children.watch()

if __name__ == "__main__":
    main()

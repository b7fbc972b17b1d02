"""`make run`: start the whole suite locally on embedded defaults.

Every service runs as its own process (as in production), with file ledgers
under one data directory. URLs are printed; Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from streamtx.service.readiness import wait_ready

# Start order matters: participants before the coordinator that recovers into them.
SERVICES = [("broker", 8082), ("pendingack", 8083), ("coordinator", 8081)]


def _available() -> list[tuple[str, int]]:
    return [(n, p) for n, p in SERVICES if importlib.util.find_spec(f"streamtx.{n}.__main__")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="streamtx suite", description=__doc__)
    parser.add_argument("--data-dir", default="data", help="where the file ledgers live")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ledger-url", default=None, help="override, e.g. kafka://127.0.0.1:9092")
    args = parser.parse_args(argv)

    services = _available()
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    urls = {name: f"http://{args.host}:{port}" for name, port in services}
    common = {
        "STREAMTX_LEDGER_URL": args.ledger_url or f"file://{data / 'ledgers'}",
        **{f"STREAMTX_{name.upper()}_URL": url for name, url in urls.items()},
    }
    procs: list[subprocess.Popen[bytes]] = []

    def stop_all(*_: object) -> None:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        print("streamtx: stopped")
        sys.exit(0)

    signal.signal(signal.SIGINT, stop_all)
    signal.signal(signal.SIGTERM, stop_all)
    for name, port in services:
        env = {**os.environ, **common, "STREAMTX_HOST": args.host, "STREAMTX_PORT": str(port)}
        proc = subprocess.Popen([sys.executable, "-m", f"streamtx.{name}"], env=env)
        procs.append(proc)
        try:
            wait_ready(urls[name], proc, timeout_s=30)
        except (RuntimeError, TimeoutError) as exc:
            print(f"streamtx: {name}: {exc}", flush=True)
            stop_all()
        print(f"streamtx: {name:<12} {urls[name]}  (docs: {urls[name]}/docs)", flush=True)
    print(f"streamtx: ledgers in {common['STREAMTX_LEDGER_URL']}; Ctrl-C stops", flush=True)
    while True:
        for (name, _), proc in zip(services, procs, strict=True):
            if proc.poll() is not None:
                print(f"streamtx: {name} exited with {proc.returncode}; stopping", flush=True)
                stop_all()
        time.sleep(0.5)


if __name__ == "__main__":
    main()

"""The ``streamtx`` command: run a service or the suite, the demo and its checker.

``streamtx serve <service>`` runs one service (settings from ``STREAMTX_*``
variables, as in the container image); ``streamtx suite`` runs every installed
service as its own process on embedded defaults (``make run``).

``streamtx demo reshard`` runs the resharding task exactly once against a
suite it starts itself (see ``streamtx.demo``); ``streamtx verify`` checks a run
(the destination topic against the generator's and the workers' histories) and
exits non-zero on any anomaly.

``streamtx jobs histograms|compact`` runs a Spark job over the ledgers
(``spark-jobs/``; ``spark-submit spark-jobs/<job>.py`` does the same on a cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import sys
from pathlib import Path

#: What ``streamtx serve`` runs: each is ``streamtx.<name>.__main__:main``.
SERVICES = ("coordinator", "broker", "pendingack", "replication")


def _serve(args: argparse.Namespace) -> int:
    module = f"streamtx.{args.service}.__main__"
    if importlib.util.find_spec(f"streamtx.{args.service}") is None:
        raise SystemExit(f"streamtx serve: the {args.service} service is not in this installation")
    importlib.import_module(module).main()
    return 0


def _probe(args: argparse.Namespace) -> int:
    """0 when the service answers ``/<path>`` with 200 (the image's HEALTHCHECK, the chart's helm test)."""
    import os
    import urllib.error
    import urllib.request

    base = args.url or f"http://127.0.0.1:{args.port or int(os.environ.get('STREAMTX_PORT', '8080'))}"
    try:
        with urllib.request.urlopen(f"{base.rstrip('/')}/{args.path}", timeout=args.timeout) as r:
            return 0 if r.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"streamtx probe: {base}: {exc}")
        return 1


def _demo(args: argparse.Namespace) -> int:
    from streamtx.demo.supervisor import Options, run_demo

    return run_demo(Options(
        duration_s=args.duration, rate=args.rate, workers=args.workers,
        commit_interval_ms=args.commit_interval_ms, txn_timeout_ms=args.txn_timeout_ms,
        chaos=args.chaos, kill_every_s=args.kill_every, zombie=args.zombie, run_dir=args.run_dir,
        keep=args.keep, seed=args.seed, quiet=args.quiet, assignment=args.assignment, users=args.users,
        backlog=args.backlog, url=args.url, kills_per_kind=args.kills_per_kind,
    ))


def _verify(args: argparse.Namespace) -> int:
    from streamtx.demo.rest import Rest
    from streamtx.demo.verify import verify

    async def go() -> bool:
        if args.url:
            rest = await Rest.discover(args.url)
        else:
            urls = json.loads((args.run_dir / "services.json").read_text())
            rest = Rest(urls["coordinator"], urls["broker"])
        try:
            report = await verify(rest, args.run_dir)
        finally:
            await rest.aclose()
        print(report.render())
        return report.ok

    return 0 if asyncio.run(go()) else 1


def _jobs(argv: list[str]) -> int:
    jobs = ("histograms", "compact")  # spark-jobs/streamtx/jobs/<job>.py
    if not argv or argv[0] not in jobs:
        print(f"usage: streamtx jobs {{{','.join(jobs)}}} [--help | options]", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    job = importlib.import_module(f"streamtx.jobs.{argv[0]}")
    code: int = job.main(argv[1:])
    return code


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _not_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamtx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("serve", help="run one service (settings: STREAMTX_* environment)")
    s.add_argument("service", choices=SERVICES)
    s.set_defaults(func=_serve)
    h = commands.add_parser("probe", help="exit 0 if the local service answers /healthz (or /readyz)")
    h.add_argument("path", nargs="?", choices=("healthz", "readyz"), default="healthz")
    h.add_argument("--port", type=int, default=None, help="local port; default: STREAMTX_PORT, else 8080")
    h.add_argument("--url", default=None, help="probe this service instead of the local one")
    h.add_argument("--timeout", type=float, default=3.0)
    h.set_defaults(func=_probe)
    a = commands.add_parser("suite", help="run every service locally (`streamtx suite --help`)",
                            add_help=False)
    a.add_argument("suite_args", nargs=argparse.REMAINDER)
    j = commands.add_parser("jobs", add_help=False,
                            help="Spark jobs over the ledgers: `streamtx jobs histograms|compact --help`")
    j.add_argument("job_args", nargs=argparse.REMAINDER)
    demo = commands.add_parser("demo", help="demos")
    demos = demo.add_subparsers(dest="demo", required=True)
    r = demos.add_parser("reshard", help="exactly-once resharding of search logs (docs/background.md)")
    r.add_argument("--duration", type=float, default=30.0, help="seconds the generator writes (30)")
    r.add_argument("--rate", type=_not_negative, default=11_000.0,
                   help="records per second of ~190 bytes (11000, about 2.1 MB/s)")
    r.add_argument("--workers", type=_at_least_one, default=2, help="resharding worker processes (2)")
    r.add_argument("--commit-interval-ms", type=int, default=500, help="one transaction per interval (500)")
    r.add_argument("--txn-timeout-ms", type=int, default=10_000, help="workers' transaction timeout (10000)")
    r.add_argument("--chaos", action="store_true", help="kill -9 and restart a random process repeatedly")
    r.add_argument("--kill-every", type=float, default=5.0, help="seconds between chaos kills (5)")
    r.add_argument("--kills-per-kind", type=int, default=0,
                   help="the recovery plan instead of --chaos: kill -9 the broker, the coordinator, the "
                   "pending-ack store and a worker this many times each, one at a time, the next once the "
                   "job commits every partition again; the load runs until then (--duration unused)")
    r.add_argument("--zombie", action="store_true",
                   help="SIGSTOP a worker past its txn timeout, then SIGCONT")
    r.add_argument("--run-dir", type=Path, default=None, help="keep ledgers and histories here (temp dir)")
    r.add_argument("--keep", action="store_true", help="leave the suite running for `streamtx verify`")
    r.add_argument("--assignment", choices=("failover", "shared"), default="failover",
                   help="failover: one Failover subscription, one active worker per source partition "
                   "(default); shared: the naive job, all "
                   "workers on one Shared subscription (shows the order anomaly the checker catches)")
    r.add_argument("--users", type=int, default=100_000, help="user ids are drawn from [0, users) (100000)")
    r.add_argument("--backlog", type=int, default=0,
                   help="throughput mode: write this many records first, then start the workers; "
                   "MB/s is timed from the first transaction to the last commit (0: live at --rate)")
    r.add_argument("--url", default=None,
                   help="run the job against this running deployment (any service's URL, replicas "
                   "and all) instead of starting a suite; --chaos then kills only workers")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_demo)
    v = commands.add_parser("verify", help="check a run: lost, duplicate, aborted, reordered records")
    v.add_argument("--run-dir", type=Path, required=True, help="the run directory the demo printed")
    v.add_argument("--url", default=None, help="any service of the suite (default: from the run dir)")
    v.set_defaults(func=_verify)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["suite"]:  # the suite parses its own options (--help included)
        from streamtx.launch.suite import main as suite_main

        suite_main(argv[1:])
        return
    if argv[:1] == ["jobs"]:  # each job parses its own options (--help included)
        raise SystemExit(_jobs(argv[1:]))
    args = build_parser().parse_args(argv)
    raise SystemExit(args.func(args))


if __name__ == "__main__":
    main()

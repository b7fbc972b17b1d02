"""Recovery time after a crash (issue 25): ``python bench/recovery.py [--kills 10]``.

Runs the demo's resharding job (``streamtx demo reshard``: the suite on file
ledgers, two workers, a steady load) under the recovery plan: the broker, the
coordinator, the pending-ack store and a worker are each killed with kill -9
and restarted ``--kills`` times, kinds in turn, one kill at a time, the next
only once the job is whole again (every source partition advanced by a
transaction opened after the kill) and a second later. Then the load stops, the
job drains and the checker runs. Prints the demo's output (its recovery table
splits each kind's recovery into restart and rejoin: docs/recovery.md) and,
last::

    bench recovery: broker_p99_ms=<…> coordinator_p99_ms=<…> pendingack_p99_ms=<…>
    worker_p99_ms=<…> longest_stall_ms=<…>        (one line)

With ``--replicas [N]`` (2 by default) the suite runs N brokers, N pending-ack
stores and N coordinators leased over a redis-server the run starts (the callers
are given replica 0's URLs and follow redirects), and the plan kills the other
replicas, one at a time (replica 0 stands in for the load balancer a deployment
puts in front: killing it is the single-process case above). The last line is
the same with the prefix ``bench recovery replicas:``.

Exits 1 when the checker finds an anomaly (the figures are printed anyway).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamtx.demo.recovery import bench_line
from streamtx.demo.replicas import replica_name
from streamtx.demo.supervisor import Demo, Options, run_demo, services


def options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills per kind of process (10)")
    parser.add_argument("--rate", type=float, default=500.0, help="records per second (500, the chaos run's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--txn-timeout-ms", type=int, default=4_000)
    parser.add_argument("--run-dir", type=Path, default=None, help="keep the run here (default: temporary)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replicas", type=int, nargs="?", const=2, default=1,
                        help="replicas of each service over Redis (2 if given alone); kills spare replica 0")
    parser.add_argument("--lease-ttl-ms", type=int, default=None,
                        help="the replicas' lease TTL (default: the services' own, 5000)")
    parser.add_argument("--verbose", action="store_true", help="say each kill as it happens")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    spare = tuple(replica_name(k, 0, args.replicas) for k in services) if args.replicas > 1 else ()
    return Options(rate=args.rate, workers=args.workers, commit_interval_ms=args.commit_interval_ms,
                   txn_timeout_ms=args.txn_timeout_ms, kills_per_kind=args.kills, run_dir=args.run_dir,
                   seed=args.seed, quiet=not args.verbose, replicas=args.replicas,
                   lease_ttl_ms=args.lease_ttl_ms, spare=spare)


def main(argv: list[str] | None = None) -> int:
    opts = options(argv)
    demo = Demo(opts)
    code = run_demo(opts, demo)
    assert demo.recovery is not None
    prefix = "bench recovery replicas" if opts.replicas > 1 else "bench recovery"
    print(bench_line(demo.recovery, prefix), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

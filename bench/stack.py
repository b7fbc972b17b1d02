"""What else pays on the resharding job, side by side in one run (issue 15 item 4): ``make bench-stack``.

The streamtx half of ``make bench-peer``'s backlog mode (the demo's supervisor,
workers and services on file ledgers: ``--backlog`` records first, then the job,
timed from the first transaction opened to the last commit) in variants that
each change one thing from the defaults:

- ``default``: services on uvicorn with uvloop and httptools, the workers and the
  generator on uvloop, worker fetches of up to 10,000 records;
- ``services_asyncio``: the services on asyncio's own loop (``STREAMTX_SERVER_LOOP``);
- ``services_h11``: the services parse HTTP with h11 (``STREAMTX_SERVER_HTTP``);
- ``clients_asyncio``: the workers and the generator on asyncio's own loop;
- ``fetch_1000``: worker fetches of up to 1,000 records (the earlier long-poll batch).

The variants run interleaved, round after round, so the machine's load (shared,
2 cores) falls on all of them alike; each row is the median over the rounds
of its MB/s and of the CPU microseconds per record of each process over the
job's window (from ``/proc``), and its ratio to ``default`` in the same rounds.
Then, in this process, the JSON bodies still on the hot path (the broker's
transactional-ack forward to the pending-ack store and the store's end call
back) decoded by pydantic (what the services use), orjson and msgspec.

Last line: ``bench stack: <variant>=<MB/s ratio to default> ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import threading
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path

from streamtx.demo.procs import cpu_seconds
from streamtx.demo.supervisor import Demo, Options
from streamtx.demo.verify import load_workers

VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "services_asyncio": {"service_env": {"STREAMTX_SERVER_LOOP": "asyncio"}},
    "services_h11": {"service_env": {"STREAMTX_SERVER_HTTP": "h11"}},
    "clients_asyncio": {"loop": "asyncio"},
    "fetch_1000": {"fetch_max": 1000},
}


@dataclass
class Sample:
    """One run of one variant."""

    mb_per_s: float
    cpu_us: dict[str, float]  # per record, per process, over the job's window
    load: float
    ok: bool


@dataclass
class Sampler:
    """CPU seconds of the demo's processes every 0.2 s, to cut out the job's window afterwards."""

    demo: Demo
    rows: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    stopping: bool = False

    def run(self) -> None:
        while not self.stopping:
            snap = {"supervisor": cpu_seconds(os.getpid())}
            for c in [*self.demo.services.values(), *self.demo.workers]:
                if c.proc is not None and c.alive():
                    snap[c.name] = cpu_seconds(c.proc.pid)
            self.rows.append((time.time(), snap))
            time.sleep(0.2)

    def over(self, t0: float, t1: float) -> dict[str, float]:
        before = max((r for r in self.rows if r[0] <= t0), key=lambda r: r[0], default=self.rows[0])[1]
        after = max((r for r in self.rows if r[0] <= t1), key=lambda r: r[0], default=self.rows[-1])[1]
        return {k: after[k] - before[k] for k in after if k in before}


def run_variant(name: str, backlog: int) -> Sample:
    opts = Options(quiet=True, backlog=backlog, **VARIANTS[name])  # type: ignore[arg-type]
    demo = Demo(opts)
    sampler = Sampler(demo)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    load = float(Path("/proc/loadavg").read_text().split()[0])
    try:
        result, report = asyncio.run(demo.run())
        window = load_workers(demo.run_dir).window
    finally:
        sampler.stopping = True
        thread.join()
        demo.shutdown()
        shutil.rmtree(demo.run_dir, ignore_errors=True)
    cpu = sampler.over(*window) if window is not None else {}
    per_record = {k: v / result.records * 1e6 for k, v in cpu.items()}
    mb_per_s = result.bytes_written / 1e6 / result.seconds if result.seconds else 0.0
    return Sample(mb_per_s, per_record, load, report.ok)


def bodies() -> list[str]:
    """µs per decode of the hot JSON bodies left, by pydantic (the services'), orjson and msgspec."""
    import msgspec
    import orjson

    from streamtx.contracts.models import PendingAckCreate

    class AckBody(msgspec.Struct):
        topic: str
        subscription: str
        txn_id: str
        message_ids: list[str]
        cumulative: bool = False

    lines = []
    for n, what in ((16, "a cumulative-ack txn's forward (16 ids)"),
                    (10_000, "one id per record (10,000 ids)")):
        body = orjson.dumps({"topic": "persistent://public/demo/src", "subscription": "reshard",
                             "txn_id": "0:17", "message_ids": [f"5:{i // 100}:{i % 100}" for i in range(n)],
                             "cumulative": False})
        number = max(3, 20_000 // n)
        timings = {
            "pydantic": lambda b=body: PendingAckCreate.model_validate_json(b),
            "orjson": lambda b=body: orjson.loads(b),
            "msgspec": lambda b=body: msgspec.json.decode(b, type=AckBody),
        }
        cells = [f"{k} {min(timeit.repeat(f, number=number, repeat=3)) / number * 1e6:.1f}"
                 for k, f in timings.items()]
        lines.append(f"  decode {what}: " + ", ".join(cells) + " us")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=100_000, help="records per run (100000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every variant, interleaved (3)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    args = parser.parse_args()
    names = args.variants.split(",")
    if "default" not in names:
        names.insert(0, "default")
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            s = run_variant(name, args.backlog)
            samples[name].append(s)
            print(f"round {r + 1} {name:<17} {s.mb_per_s:6.2f} MB/s  load {s.load:5.1f}  cpu us/record "
                  + ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.cpu_us.items()))
                  + ("" if s.ok else "  ANOMALIES"), flush=True)
    print(f"\n{'variant':<17} {'MB/s':>6} {'ratio':>6} {'cpu us/rec':>10}  "
          f"per process (median of {args.rounds})")
    ratios: dict[str, float] = {}
    for name in names:
        got = samples[name]
        ratios[name] = statistics.median(s.mb_per_s / d.mb_per_s for s, d in zip(got, samples["default"],
                                                                                   strict=True))
        procs = sorted({k for s in got for k in s.cpu_us})
        per = {k: statistics.median(s.cpu_us.get(k, 0.0) for s in got) for k in procs}
        print(f"{name:<17} {statistics.median(s.mb_per_s for s in got):6.2f} {ratios[name]:6.2f} "
              f"{sum(per.values()):10.0f}  " + ", ".join(f"{k} {v:.0f}" for k, v in per.items()))
    print("\nhot-path JSON bodies (this process):")
    print("\n".join(bodies()))
    print("bench stack: " + " ".join(f"{n}={ratios[n]:.2f}" for n in names), flush=True)
    if not all(s.ok for got in samples.values() for s in got):
        sys.exit(1)


if __name__ == "__main__":
    main()

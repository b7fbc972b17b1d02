"""The search front ends: write search-log records to the source topic at a target rate.

Run as its own process (``python -m streamtx.demo.generator``). Every tick it
sends what is due as ONE produce request (explicit partition per record) and
waits for it; a failed request (broker down, 503, timeout) is resent with the
same records and sequence numbers until acknowledged, so sequence numbers per
source partition stay gapless. Requests carry the producer identity
(name, epoch, request sequence), so the broker drops a resend whose first
attempt did land (the workers would also drop such a copy by sequence number). Only
acknowledged requests go to ``generator.jsonl``. A status line of JSON goes to
stdout every second for the supervisor's progress bar.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

from streamtx.demo.layout import RunConfig, generator_log
from streamtx.demo.procs import LOOPS, run_async
from streamtx.demo.records import encode, next_record
from streamtx.demo.rest import Rest
from streamtx.errors import ConflictError, StreamtxError

tick_s = 0.05
max_batch = 4000  # records per request when catching up after an outage


async def run(cfg: RunConfig, run_dir: Path, broker_url: str, rate: float, duration_s: float,
              seed: int, count: int = 0) -> None:
    """Write at ``rate`` for ``duration_s``, or until ``count`` records when it is set."""
    rng = random.Random(seed)
    rest = Rest(broker_url, broker_url, timeout_s=5.0)
    seqs = [0] * cfg.source_partitions
    written = bytes_written = retries = requests = 0
    start = time.monotonic()
    last_status = start
    # SIGTERM ends the load after the request under way (the recovery plan stops it so).
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with generator_log(run_dir).open("a") as log:
        while ((now := time.monotonic()) - start < duration_s and not (count and written >= count)
               and not stop.is_set()):
            due = min(int(rate * (now - start)) - written, max_batch, *([count - written] if count else []))
            if due <= 0:
                await asyncio.sleep(tick_s)
                continue
            recs: list[list[int]] = []
            messages: list[dict[str, Any]] = []
            sent_at_ms = int(time.time() * 1000)
            for _ in range(due):
                rec = next_record(rng, cfg, seqs, sent_at_ms)
                recs.append([rec.src_partition, rec.seq, rec.user_id])
                messages.append({"key": rec.key, "value": encode(rec, cfg.record_size),
                                 "properties": {}, "partition": rec.src_partition})
            size = sum(len(m["value"]) for m in messages)
            producer = {"name": f"generator-{cfg.run_id}", "epoch": 0, "sequence": requests}
            requests += 1
            attempt = 0
            while True:
                t0 = time.monotonic()
                try:
                    await rest.produce(cfg.source_topic, messages, producer=producer)
                    break
                except ConflictError:
                    if attempt == 0:
                        raise
                    break  # a resend of a request that landed, past the broker's memory of ids
                except StreamtxError as exc:
                    retries += 1
                    attempt += 1
                    if not exc.retriable and retries % 50 == 1:
                        print(json.dumps({"error": str(exc)}), file=sys.stderr, flush=True)
                    await asyncio.sleep(0.1)
            lat_ms = (time.monotonic() - t0) * 1000
            log.write(json.dumps({"lat_ms": round(lat_ms, 2), "r": recs}, separators=(",", ":")) + "\n")
            log.flush()
            written += due
            bytes_written += size
            if time.monotonic() - last_status >= 1.0:
                last_status = time.monotonic()
                _status(written, bytes_written, retries, done=False)
    _status(written, bytes_written, retries, done=True)
    await rest.aclose()


def _status(written: int, bytes_written: int, retries: int, *, done: bool) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"written": written, "bytes": bytes_written, "retries": retries, "done": done,
                      "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--rate", type=float, default=10_000, help="records per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds")
    parser.add_argument("--count", type=int, default=0, help="stop after this many records (0: no limit)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    args = parser.parse_args(argv)
    cfg = RunConfig.load(args.run_dir)
    run_async(run(cfg, args.run_dir, args.broker, args.rate, args.duration, args.seed, args.count), args.loop)


if __name__ == "__main__":
    main()

"""Measure transaction-buffer recovery: ``python bench/txnbuffer_recovery.py --aborted 1000000``.

Builds a partition whose buffer holds N aborted ids (each with its own abort
marker position, in marker order), writes its segmented snapshot with the
broker's own snapshot code, then times a fresh :meth:`Partition.open` on the
same ledgers: the real recovery path (read the newest index and its segments,
replay the partition after it). The partition ledger itself is left nearly
empty: with a snapshot, recovery never reads the entries before the snapshot
position, so writing the 2N entries first would only make the set-up slow.
Prints ``tb_recovery_s=<seconds> aborted=<N>`` last.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.settings import BrokerSettings
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position, open_ledger_factory

_name = "persistent://bench/tb/recovery-partition-0"


async def measure(ledger_url: str, aborted: int, segment_size: int = 1000) -> float:
    """Seconds a fresh partition takes to recover ``aborted`` aborted ids from its snapshot."""
    settings = BrokerSettings(ledger_url=ledger_url, snapshot_segment_size=segment_size,  # type: ignore[call-arg]
                              snapshot_every_ops=1 << 62)
    ledgers = open_ledger_factory(ledger_url)
    part = await Partition.open(ledgers, _name, _name.rsplit("-partition-", 1)[0], settings, Notifier())
    lid = part.ledger.ledger_id
    for i in range(aborted):
        part.tb.add_aborted(TxnId(1, i), Position(lid, 1_000 + 2 * i))
    await part.take_snapshot()
    if not ledger_url.startswith("memory:"):  # a memory store forgets everything on close
        await part.close()
        await ledgers.close()
        ledgers = open_ledger_factory(ledger_url)
    t0 = time.perf_counter()
    again = await Partition.open(ledgers, _name, _name.rsplit("-partition-", 1)[0], settings, Notifier())
    took = time.perf_counter() - t0
    if len(again.tb.aborted) != aborted:
        raise AssertionError(f"recovered {len(again.tb.aborted)} aborted ids, not {aborted}")
    await again.close()
    await ledgers.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aborted", type=int, default=1_000_000)
    parser.add_argument("--segment-size", type=int, default=1000)
    parser.add_argument("--ledger-url", help="default: a file ledger in a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.ledger_url or f"file://{tmp}"
        took = asyncio.run(measure(url, args.aborted, args.segment_size))
    print(f"tb_recovery_s={took:.3f} aborted={args.aborted}")


if __name__ == "__main__":
    main()

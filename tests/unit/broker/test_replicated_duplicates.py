"""Replicated writes are dropped as duplicates, deterministically (issue 21 item 17).

``Partition.start_replicated`` drops an entry whose source sequence is not above the last
one landed, or the last one started and still in flight. Removing either check was caught
by an integration test in 3 runs of 5 only: these drive both cases in order, no timing.
"""

from __future__ import annotations

import time

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.settings import BrokerSettings
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.records.partition import Message, ProducerInfo, encode_batch

NAME = "persistent://t/n/x-partition-0"
REPL = "pulsar.repl.east"


async def open_part(ledgers: LedgerFactory) -> Partition:
    return await Partition.open(ledgers, NAME, "persistent://t/n/x", BrokerSettings(), Notifier())


def copy(sequence: int) -> tuple[bytes, ProducerInfo]:
    """An entry copied from the source partition, where it was entry ``sequence``."""
    producer = ProducerInfo(REPL, 0, sequence)
    return encode_batch([Message(f"m{sequence}".encode())], publish_time_ms=int(time.time() * 1000),
                        producer=producer), producer


async def entries(part: Partition) -> int:
    return len(await part.ledger.read(None, 100))


async def test_the_same_replicated_write_twice_is_stored_once() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    before = await entries(part)
    data, producer = copy(5)
    first = part.start_replicated(data, producer, 1, 0)
    assert first is not None
    await first  # landed
    assert part.start_replicated(data, producer, 1, 0) is None  # sent again (its cursor did not move)
    assert part.start_replicated(*copy(4), 1, 0) is None  # an older one, too
    assert await entries(part) == before + 1
    again = await open_part(ledgers)  # the dedup state is rebuilt from the entries
    assert again.start_replicated(data, producer, 1, 0) is None


async def test_a_second_start_before_the_first_lands_is_dropped() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    before = await entries(part)
    data, producer = copy(7)
    first = part.start_replicated(data, producer, 1, 0)
    # No await between the two: the first has not landed, the producer table knows nothing yet.
    assert first is not None and not first.done()
    assert part.start_replicated(data, producer, 1, 0) is None
    assert part.start_replicated(*copy(6), 1, 0) is None
    later = part.start_replicated(*copy(8), 1, 0)  # the next one goes in, after it
    assert later is not None
    first_pos, later_pos = await first, await later
    assert first_pos < later_pos
    assert await entries(part) == before + 2

"""Record batches for the Kafka backend's appends (see "Writing" in :mod:`.kafka`).

All the frames of one group commit go in one Kafka record batch, so they get
consecutive offsets and land atomically; a batch over ``MAX_BATCH_BYTES`` is
split. Errors are aiokafka's, except a frame too large for any batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from streamtx.errors import LedgerError

MAX_BATCH_BYTES = 900 * 1024  # one record batch per group commit, under 1 MiB requests
MAX_REQUEST_BYTES = 1024 * 1024


def check_frame_sizes(name: str, frames: Sequence[bytes]) -> None:
    """Raise LedgerError if a frame could never fit a batch."""
    for frame in frames:
        if len(frame) > MAX_BATCH_BYTES:
            raise LedgerError(
                f"kafka ledger {name}: a frame of {len(frame)} bytes is over the "
                f"{MAX_BATCH_BYTES} byte limit"
            )


def build_batches(producer: Any, frames: Sequence[bytes], name: str) -> list[tuple[Any, int]]:
    """``frames`` in as few of ``producer``'s batch builders as fit; each with its frame count."""
    batches: list[tuple[Any, int]] = []
    builder, count = producer.create_batch(), 0
    for frame in frames:
        if builder.append(timestamp=None, key=None, value=frame) is None:
            batches.append((builder, count))
            builder, count = producer.create_batch(), 0
            if builder.append(timestamp=None, key=None, value=frame) is None:
                raise LedgerError(f"kafka ledger {name}: frame does not fit a batch")
        count += 1
    batches.append((builder, count))
    return batches


async def send_batch(producer: Any, builder: Any, tp: Any) -> asyncio.Future[Any]:
    """``producer.send_batch``, plus a workaround for an aiokafka (0.14) leak.

    A batch that fails sets its exception on its future (which ``send_batch``
    returns shielded: once our wait is cancelled by a timeout, nobody reads it)
    and on an internal "drain waiter" that nobody awaits. "Future exception was
    never retrieved" is then logged from the garbage collector, at any point of
    the program; when that happens inside ``ast.parse`` (pytest's assertion
    rewriting), CPython 3.11 raises ``SystemError: AST constructor recursion
    depth mismatch``. Mark both retrieved once the batch is done; the caller
    still sees the error through the returned future when it waits.
    """
    future: asyncio.Future[Any] = await producer.send_batch(builder, tp.topic, partition=tp.partition)
    try:
        batch = producer._message_accumulator._batches[tp][-1]
        batch_future = batch.future
    except (AttributeError, KeyError, IndexError, TypeError):
        return future  # aiokafka changed: nothing to work around

    def retrieve(_: object) -> None:
        for fut in (batch_future, getattr(batch, "_drain_waiter", None)):
            if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled():
                fut.exception()

    batch_future.add_done_callback(retrieve)
    return future

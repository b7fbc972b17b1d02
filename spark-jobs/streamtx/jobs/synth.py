"""Synthetic ledgers for the jobs' tests and benchmark, written straight in the file format.

The segment files are written with the ledger layer's own codecs
(:func:`streamtx.ledger.segment.encode_entries`, :mod:`streamtx.ledger.frames`)
and no fsync: a generator, not a service. :func:`write_ledger` can leave what
a real ledger meets: fences of new writers, a zombie's frame after a fence,
duplicates of retried appends, a trim. It returns the payloads a replay must
see, in order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from streamtx.batching.codec import encode_batch
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import frames as framing
from streamtx.ledger import segment
from streamtx.ledger.frames import FenceTracker
from streamtx.records import pendingack as pa
from streamtx.records import txnlog as tc
from streamtx.records.txnstate import EndReason, TxnState


@dataclass
class Chaos:
    """What :func:`write_ledger` mixes in (probabilities per entry)."""

    duplicate: float = 0.0  # the frame is written twice (a retried append)
    zombie: float = 0.0  # an older writer's frame lands after the fence
    new_writer: float = 0.0  # a new writer fences the log before this entry
    trim_fraction: float = 0.0  # trim this share of the entries at the end


def write_ledger(root: str, name: str, payloads: Sequence[bytes], *, segment_bytes: int = 64 << 20,
                 chaos: Chaos | None = None, seed: int = 0) -> list[tuple[int, bytes]]:
    """Write ``payloads`` as one ledger; ``(entry id, payload)`` of what replay must return."""
    chaos = chaos or Chaos()
    rng = random.Random(seed)
    directory = os.path.join(root, segment.ledger_dir_name(name))
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, "LOCK"), "a").close()
    frames: list[bytes] = []
    writer, epoch, seq = rng.getrandbits(62) + 1, 1, 0
    old: tuple[int, int, int] | None = None
    frames.append(framing.encode_fence(writer, epoch))
    for payload in payloads:
        if chaos.new_writer and rng.random() < chaos.new_writer:
            old = (writer, epoch, seq)
            writer, epoch, seq = rng.getrandbits(62) + 1, epoch + 1, 0
            frames.append(framing.encode_fence(writer, epoch))
        if old is not None and chaos.zombie and rng.random() < chaos.zombie:
            frames.append(framing.encode_data(old[0], old[1], old[2], b"zombie " + payload))
            old = (old[0], old[1], old[2] + 1)
        frame = framing.encode_data(writer, epoch, seq, payload)
        seq += 1
        frames.append(frame)
        if chaos.duplicate and rng.random() < chaos.duplicate:
            frames.append(frame)
    start = int(len(frames) * chaos.trim_fraction)
    tracker = FenceTracker()
    live: list[tuple[int, bytes]] = []
    for offset, raw in enumerate(frames):
        if offset == start and start:
            state = tracker.snapshot()
            with open(os.path.join(directory, "TRIM"), "wb") as f:
                f.write(segment.encode_trim_state(start, state.encode()))
        decoded = framing.decode(raw)
        if tracker.accept(decoded) and offset >= start:
            live.append((offset, decoded.payload))
    _write_segments(directory, frames, segment_bytes)
    return live


def _write_segments(directory: str, frames: list[bytes], segment_bytes: int) -> None:
    base, chunk, size = 0, [], 0
    for i, frame in enumerate(frames):
        chunk.append(frame)
        size += segment.HEADER_SIZE + len(frame)
        if size >= segment_bytes or i == len(frames) - 1:
            with open(os.path.join(directory, segment.segment_name(base)), "wb") as f:
                f.write(segment.encode_entries(chunk))
            base, chunk, size = i + 1, [], 0
    if not frames:
        open(os.path.join(directory, segment.segment_name(0)), "wb").close()


def entries_of(records: Sequence[bytes], rng: random.Random, *, max_batch: int = 512,
               unbatched: float = 0.1) -> Iterator[bytes]:
    """Group records into entries as the buffered writer does: batched, or one unbatched record."""
    i = 0
    while i < len(records):
        if rng.random() < unbatched:
            yield records[i]
            i += 1
            continue
        n = min(int(2 ** rng.uniform(0, max_batch.bit_length() - 1)), len(records) - i)
        yield encode_batch(records[i : i + n])
        i += n


def txn_log_records(coordinator_id: int, n_txns: int, rng: random.Random, *, t0_ms: int = 1_700_000_000_000,
                    open_share: float = 0.05, concurrent: int = 16) -> list[bytes]:
    """A transaction log's records: each txn opens, adds, decides and ends, ``concurrent`` at once."""
    out: list[bytes] = [tc.encode(tc.ReserveIds(n_txns + 1))]
    active: list[tuple[TxnId, int, list[tc.Record]]] = []
    now = t0_ms
    counter = 0
    while counter < n_txns or active:
        if counter < n_txns and (len(active) < concurrent or not active):
            txn = TxnId.of(coordinator_id, counter)
            counter += 1
            now += rng.randint(0, 5)
            out.append(tc.encode(tc.NewTxn(txn, 10_000, now)))
            plan: list[tc.Record] = [
                tc.AddPartitions(txn, (f"persistent://public/default/t-partition-{rng.randint(0, 3)}",)),
                tc.AddSubscriptions(txn, (tc.Subscription("persistent://public/default/in", "s"),)),
            ]
            if rng.random() >= open_share:
                roll = rng.random()
                end = (TxnState.COMMITTING, TxnState.COMMITTED, EndReason.CLIENT) if roll < 0.8 else (
                    (TxnState.ABORTING, TxnState.ABORTED, EndReason.CLIENT) if roll < 0.95
                    else (TxnState.ABORTING, TxnState.TIMEOUT, EndReason.TIMEOUT))
                plan += [tc.StatusChange(txn, end[0], end[2], 0), tc.StatusChange(txn, end[1], end[2], 0)]
            active.append((txn, now, plan))
            continue
        i = rng.randrange(len(active))
        txn, _opened, plan = active[i]
        if not plan:
            active.pop(i)
            continue
        record = plan.pop(0)
        now += rng.randint(0, 20)
        if isinstance(record, tc.StatusChange):
            record = tc.StatusChange(record.txn, record.state, record.reason, now)
        out.append(tc.encode(record))
    return out


def pending_ack_records(n_txns: int, rng: random.Random, *, open_share: float = 0.05) -> list[bytes]:
    """A pending-ack log's records: acks, a prepare and the end of each transaction, interleaved."""
    out: list[bytes] = []
    entry = 0
    for i in range(n_txns):
        txn = TxnId(1 << 48, i)
        ids = tuple(pa.MessageId(7, entry + k) for k in range(rng.randint(1, 4)))
        entry += len(ids)
        out.append(pa.encode(pa.PendingAck(txn, ids, False)))
        if rng.random() < open_share:
            continue
        out.append(pa.encode(pa.TxnMarker(pa.RecordKind.PREPARED, txn)))
        end = pa.RecordKind.COMMITTED if rng.random() < 0.9 else pa.RecordKind.ABORTED
        out.append(pa.encode(pa.TxnMarker(end, txn)))
    return out

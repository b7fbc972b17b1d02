"""Replicated subscriptions (PIP-33) on the broker: scanning a partition's markers, applying updates.

The replication controller runs the snapshots (:mod:`streamtx.replication.snapshots`);
the broker keeps what is durable: the marker entries inline in the partition
(codec kind 5, one JSON object each) and the subscriptions' cursors. A marker is
never handed to a consumer (dispatch skips and deletes every non-message entry
as it passes, so it never holds a reader back either).

Marker bodies, by ``type``:

* ``snapshot_request``: ``snapshot_id``, ``source_cluster``, ``round`` (1, or 2
  with three clusters or more) - written by the cluster taking the snapshot;
* ``snapshot_response``: ``snapshot_id``, ``source_cluster`` (who asked),
  ``cluster`` (who answers), ``position`` (of the request in the answering
  cluster), ``round`` - written by the answering cluster's broker right after the
  request lands there (:func:`response`), as Pulsar's broker does: no scan and no
  controller call between the two, which were a large part of a snapshot's time;
* ``snapshot``: ``snapshot_id``, ``local_position``, ``clusters`` {name: position}
  - a complete snapshot, kept here only (never replicated);
* ``update``: ``subscription``, ``clusters`` {name: position} - moves the
  subscription's mark-delete in each named cluster;
* ``acks``: ``subscription``, ``origins`` (an :class:`~streamtx.contracts.ackset.AckSet`
  on the wire) - messages the subscription acknowledged in the writing cluster
  beyond what update markers carry (beyond PIP-33): :func:`export_acks` builds
  it, every other cluster acknowledges the same messages with :func:`apply_acks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from streamtx.broker.dispatch import PartitionDispatch
from streamtx.broker.outstanding import Unit
from streamtx.broker.partition import Partition
from streamtx.broker.topic import Topic
from streamtx.contracts.ackset import AckSet, Origin, Ref
from streamtx.errors import MalformedError, NotFoundError
from streamtx.ledger import Entry, Ledger, Position
from streamtx.records import partition as codec
from streamtx.records.partition import EntryHeader, EntryKind


async def scan(part: Partition, start: Position, max_entries: int) -> dict[str, Any]:
    """Markers from ``start`` on (all, whatever their source), whether messages were seen, the end."""
    entries = await part.ledger.read(start, max_entries)
    markers: list[dict[str, Any]] = []
    data = False
    for e in entries:
        h = codec.decode_header(e.data)
        if h.kind is EntryKind.MARKER:
            markers.append({"position": str(e.position), "source": h.source.cluster if h.source else None,
                            "marker": orjson.loads(codec.marker_body(e.data, h))})
        elif h.kind is EntryKind.BATCH:
            data = True
    return {"markers": markers, "data": data, "last": str(entries[-1].position) if entries else None}


def response(request: dict[str, Any], local_cluster: str, at: Position) -> dict[str, Any]:
    """``local_cluster``'s answer to a request marker it holds at ``at``."""
    return {"type": "snapshot_response", "snapshot_id": request.get("snapshot_id"),
            "source_cluster": request.get("source_cluster"), "cluster": local_cluster,
            "position": str(at), "round": request.get("round")}


def mark_deletes(topic: Topic, index: int) -> dict[str, str | None]:
    """The mark-delete position on partition ``index`` of every replicated subscription."""
    out: dict[str, str | None] = {}
    for name, sub in topic.subscriptions.items():
        if sub.replicated:
            md = sub.part(index).cursor.mark_delete_position
            out[name] = str(md) if md is not None else None
    return out


def parse_position(part: Partition, text: str) -> Position:
    try:
        pos = Position.parse(text)
    except ValueError:
        raise MalformedError(f"bad position {text!r}") from None
    if pos.ledger_id != part.ledger.ledger_id:
        # Well-formed, of another partition: no entry of this one, as the trim route answers.
        raise NotFoundError(f"{text} is not a position of {part.name}")
    return pos


# --- acknowledgements synced between clusters (beyond PIP-33) ----------------------


@dataclass(frozen=True, slots=True)
class AckedHere:
    """What applying an ``acks`` marker here does (:func:`acked_here`)."""

    units: list[Unit]  # messages to acknowledge
    fillers: list[Position]  # non-message entries to delete along
    missing: list[Origin]  # origins whose last named entry is not here yet (on their way)
    next: Position  # where the walk ended: a retry reads on from there


def origin_of(h: EntryHeader, pos: Position, cluster: str) -> Ref:
    """The entry's name in every cluster: its source's for a replicated one, else ours."""
    if h.source is not None:
        return h.source.cluster, h.source.ledger_id, h.source.entry_id
    return cluster, pos.ledger_id, pos.entry_id


async def _read_span(ledger: Ledger, first: Position, last: Position, limit: int) -> list[Entry]:
    out: list[Entry] = []
    pos = first
    while len(out) < limit and pos <= last:
        got = [e for e in await ledger.read(pos, min(limit - len(out), 1000)) if e.position >= first]
        if not got:
            break
        out += [e for e in got if e.position <= last]
        pos = Position(got[-1].position.ledger_id, ledger.next_entry_id(got[-1].position.entry_id))
    return out[:limit]


async def export_acks(part: Partition, dispatch: PartitionDispatch, cluster: str, after: Position | None,
                      back: int, max_entries: int) -> AckSet:
    """What the subscription acknowledged past ``after`` (when None: from ``back`` entries before
    its mark-delete position), by origin.

    Only message entries count (markers the dispatcher deleted as it passed them
    would make every marker look like news), and not aborted ones, which the dispatcher
    deletes as it passes them too: never replicated, an aborted entry named last of its
    origin was the entry every other cluster waited for, for good if nothing followed.
    Reads at most ``max_entries`` entries: acks further on are left for a later export.
    """
    cursor = dispatch.cursor
    spans = cursor.deleted_ranges()
    md = cursor.mark_delete_position
    if md is not None:
        first = (Position(md.ledger_id, max(0, md.entry_id - back)) if after is None
                 else Position(after.ledger_id, part.ledger.next_entry_id(after.entry_id)))
        if first <= md:
            spans.insert(0, (first, md))
    runs: list[list[Ref]] = []
    budget = max_entries
    for first, last in spans:
        if budget <= 0:
            break
        entries = await _read_span(part.ledger, first, last, budget)
        budget -= len(entries)
        runs.append([origin_of(h, e.position, cluster) for e in entries
                     if (h := codec.decode_header(e.data)).kind is EntryKind.BATCH
                     and not (h.txn is not None and part.tb.is_aborted(h.txn))])
    partial: list[tuple[Ref, int, int]] = []
    for pos, size, bits in cursor.partial_batches()[:max(budget, 0)]:
        entries = await part.ledger.read(pos, 1)
        if entries and entries[0].position == pos:
            partial.append((origin_of(codec.decode_header(entries[0].data), pos, cluster), size, bits))
    return AckSet.build(runs, partial)


async def acked_here(part: Partition, dispatch: PartitionDispatch, cluster: str, acks: AckSet,
                     max_entries: int, start: Position | None = None) -> AckedHere:
    """This partition's messages that ``acks`` names and the subscription has not acknowledged
    yet, the entries to delete with them, and whether every one named can be here already.

    Reads from the subscription's first undeleted entry (or ``start``, if later: a
    retry reads only what arrived since) until every origin's last named id is
    passed (or the partition's end, or ``max_entries``); an origin whose last named
    id is not reached has entries still on their way here.

    Entries that are not messages (markers, aborted batches) are deleted along, as the
    dispatcher deletes them when it passes them, where they follow a deleted entry or
    one acknowledged now: a cluster with no consumer on the subscription has no
    dispatcher passing them, and the markers between the messages (snapshot rounds,
    other clusters' acks) held its mark-delete position back before the first of them
    although every message was acknowledged. Never one after a message still
    unacknowledged, so no new hole is made in the cursor; past ``maxReadPosition``
    too (where the dispatcher does not read yet): a marker is never delivered, and
    the last entries appended (the ``acks`` marker itself, often) are past it for a
    moment, which would leave the mark-delete before them until the next apply.
    """
    cursor = dispatch.cursor
    todo = acks.last()
    units: list[Unit] = []
    fillers: list[Position] = []
    first = cursor.first_undeleted()
    pos = first if start is None or start < first else start
    gone = start is None or pos == first  # the entry before ``pos`` is deleted (or about to be)
    read = 0
    while todo and read < max_entries:
        entries = await part.ledger.read(pos, min(1000, max_entries - read))
        if not entries:
            break
        read += len(entries)
        for e in entries:
            h = codec.decode_header(e.data)
            ref = origin_of(h, e.position, cluster)
            if todo.get(ref[:2], -1) <= ref[2]:
                todo.pop(ref[:2], None)
            if cursor.is_deleted(e.position):
                gone = True
                continue
            if h.kind is not EntryKind.BATCH or (h.txn is not None and part.tb.is_aborted(h.txn)):
                if gone:
                    fillers.append(e.position)
                continue
            got = acks.lookup(ref)
            if got is True:
                units.append((e.position, None))
                gone = True
            elif got:
                size, bits = got
                units += [(e.position, i) for i in range(min(size, h.count))
                          if bits >> i & 1 and not cursor.is_deleted(e.position, i)]
                gone = all(bits >> i & 1 or cursor.is_deleted(e.position, i) for i in range(h.count))
            else:
                gone = False
        pos = Position(pos.ledger_id, part.ledger.next_entry_id(entries[-1].position.entry_id))
    return AckedHere(units, fillers, sorted(todo), pos)

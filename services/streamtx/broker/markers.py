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
  cluster), ``round``;
* ``snapshot``: ``snapshot_id``, ``local_position``, ``clusters`` {name: position}
  - a complete snapshot, kept here only (never replicated);
* ``update``: ``subscription``, ``clusters`` {name: position} - moves the
  subscription's mark-delete in each named cluster.
"""

from __future__ import annotations

from typing import Any

import orjson

from streamtx.broker import codec
from streamtx.broker.codec import EntryKind
from streamtx.broker.partition import Partition
from streamtx.broker.topic import Topic
from streamtx.errors import MalformedError
from streamtx.ledger import Position


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


def mark_deletes(topic: Topic, index: int) -> dict[str, str | None]:
    """The mark-delete position on partition ``index`` of every replicated subscription."""
    out: dict[str, str | None] = {}
    for name, sub in topic.subscriptions.items():
        if sub.replicated:
            md = sub.parts[index].cursor.mark_delete_position
            out[name] = str(md) if md is not None else None
    return out


def parse_position(part: Partition, text: str) -> Position:
    try:
        pos = Position.parse(text)
    except ValueError:
        raise MalformedError(f"bad position {text!r}") from None
    if pos.ledger_id != part.ledger.ledger_id:
        raise MalformedError(f"{text} is not a position of {part.name}")
    return pos

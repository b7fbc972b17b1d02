"""The replication API between the controller and a broker (docs/internal-api.md, "Replication").

The replication controller (``services/streamtx/replication``) sends these bodies to
its own cluster's broker and, for ``write`` and ``topics``, to a remote cluster's;
the broker's routes (``broker/replication/routes.py``, ``subscription_routes.py``)
validate with the same models. Every call but ``topics`` names one partition
(``topic`` + ``partition``) and is served by its owner (307 elsewhere).

Positions are ``"ledger:entry"`` strings; a marker (``marker``) is the JSON of a
replication marker (:mod:`streamtx.broker.replication.markers` says which kinds).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema

from streamtx.contracts.body import Base64Text, StrictBody
from streamtx.contracts.txnid import PositionText
from streamtx.names import MAX_PARTITIONS, TopicName


class TopicReplicas(StrictBody):
    """One topic of the cluster, as ``GET /v1/replication/topics`` lists it; ``remotes``: those it
    has replicator cursors for (the controller deletes those it no longer wants)."""

    topic: str
    partitions: int
    remotes: list[str] = Field(default_factory=list)


class ReplicationTopics(StrictBody):
    """The answer to ``GET /v1/replication/topics``: every topic of the cluster (its catalog)."""

    topics: list[TopicReplicas]


class ReplicatedTopic(StrictBody):
    """``POST /v1/replication/topics``: a replicated topic as its source has it, created here with
    these partitions if missing (409 if it exists with others)."""

    topic: TopicName  # checked as Pulsar does (a made-up name was a ledger file too long: 503)
    partitions: int = Field(ge=1, le=MAX_PARTITIONS)


class ReplicatorCursor(StrictBody):
    """``POST /v1/replication/cursor``: open the ``pulsar.repl.<remote>`` cursor of one partition
    (idempotent); ``connected``: whether the controller reaches the remote (for stats)."""

    topic: TopicName
    partition: int = Field(ge=0)
    remote: str = Field(min_length=1)
    connected: bool = False


class ReplicatorCursorDelete(StrictBody):
    """``POST /v1/replication/cursor/delete``: ``topic`` no longer replicates to ``remote``; its
    replicator cursors go, on every partition (idempotent)."""

    topic: TopicName
    remote: str = Field(min_length=1)


class ReplicationRead(StrictBody):
    """``POST /v1/replication/read``: a partition's local entries for ``remote``, after ``after``
    (None: from its replicator cursor), waiting up to ``wait_ms`` for one."""

    topic: TopicName
    partition: int = Field(ge=0)
    remote: str = Field(min_length=1)
    after: str | None = None
    max_entries: int = Field(default=500, ge=1, le=10_000)
    wait_ms: int = Field(default=0, ge=0, le=30_000)
    connected: bool = True  # whether the controller reaches the remote (for stats)


class ReplicatorAck(StrictBody):
    """``POST /v1/replication/ack``: everything through ``position`` reached ``remote``
    (``messages`` of ``bytes`` were sent): the replicator cursor moves there."""

    topic: TopicName
    partition: int = Field(ge=0)
    remote: str = Field(min_length=1)
    position: PositionText
    messages: int = Field(default=0, ge=0)
    bytes: int = Field(default=0, ge=0)


class ReplicatedMessage(StrictBody):
    """One message of a replicated entry (``value`` base64)."""

    key: str | None = None
    value: Base64Text = ""
    properties: dict[str, str] = Field(default_factory=dict)


class ReplicatedEntry(StrictBody):
    """One source entry, as ``read`` answers it: its messages, or a marker."""

    # The schema says what ``write`` checks (one or more messages, or a marker), so a
    # schema-valid request is never refused (the OpenAPI fuzz test sends entries with neither).
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["marker"], "properties": {"marker": {"type": "object"}}},
        {"required": ["messages"], "properties": {"messages": {"type": "array", "minItems": 1}}},
    ]})

    position: PositionText
    # At most 2**53: JSON Schema readers hold numbers as doubles, and a bound of 2**63 came out
    # as a schema-valid 2**63 in the OpenAPI fuzz test (a publish time in ms: 285,000 years).
    publish_time: int = Field(default=0, ge=0, le=1 << 53)
    messages: list[ReplicatedMessage] | None = None
    marker: dict[str, Any] | None = None


class ReplicationEntries(StrictBody):
    """The answer to ``read``: the entries (markers local to this cluster left out), and ``last``,
    the position read through (None: nothing new before ``wait_ms`` ran out)."""

    entries: list[ReplicatedEntry]
    last: str | None = None


class ReplicationWrite(StrictBody):
    """``POST /v1/replication/write`` (on the remote cluster's broker): entries of ``source``, in
    their source order, to append to one partition (repeats are dropped)."""

    topic: TopicName
    partition: int = Field(ge=0)
    source: str = Field(min_length=1)
    entries: list[ReplicatedEntry]


class ReplicationMarker(StrictBody):
    """``POST /v1/replication/markers``: a replication marker to append to one partition."""

    topic: TopicName
    partition: int = Field(ge=0)
    marker: dict[str, Any]


_u64 = {"type": "integer", "minimum": 0, "maximum": (1 << 64) - 1}
#: ``origins`` of an ``acks`` marker (:meth:`streamtx.contracts.ackset.AckSet.from_wire`
#: checks them where they are used); the schema says what it accepts, so a schema-valid
#: origin is not refused (issue 38: ``origins: [{}]`` was a 400 though documented as any object).
AckOrigins = Annotated[list[dict[str, Any]], WithJsonSchema({"type": "array", "items": {
    "type": "object", "required": ["cluster", "ledger"],
    "description": "one origin's acknowledged entries: ranges [first, last] (first <= last) and "
                   "partial batches [entry, size, bits in hex] (bits below 1 << size)",
    "properties": {
        "cluster": {"type": "string", "minLength": 1},
        "ledger": _u64,
        "ranges": {"type": "array", "items": {"type": "array", "items": _u64, "minItems": 2, "maxItems": 2}},
        "batches": {"type": "array", "items": {"type": "array", "minItems": 3, "maxItems": 3, "prefixItems": [
            _u64, {**_u64, "minimum": 1}, {"type": "string", "pattern": "^[0-9a-f]+$"}]}},
    }}})]


class ReplicationScan(StrictBody):
    """``POST /v1/replication/scan``: a partition's markers after ``after`` (None: from ``back``
    entries before its end) and its replicated subscriptions' mark-delete positions."""

    topic: str
    partition: int = Field(ge=0)
    after: PositionText | None = None
    back: int = Field(default=10_000, ge=0)
    max_entries: int = Field(default=1000, ge=1, le=10_000)
    wait_ms: int = Field(default=0, ge=0, le=30_000)
    #: The mark-deletes the caller last saw: the long poll also ends when one moves
    #: (a snapshot it passed is an update to write now, not at the next entry).
    mark_deletes: dict[str, str | None] | None = None


class ScannedMarker(StrictBody):
    """A replication marker a scan found: where, written by which cluster (None: this one), its body."""

    position: str
    source: str | None = None
    marker: dict[str, Any]


class ScannedMarkers(StrictBody):
    """The answer to ``scan``: the markers, whether data entries were passed too, the position
    scanned through (``last``; None: nothing new), and each replicated subscription's mark-delete."""

    markers: list[ScannedMarker]
    data: bool
    last: str | None = None
    subscriptions: dict[str, str | None]


class ReplicatedSubscriptionUpdate(StrictBody):
    """``POST /v1/replication/subscriptions/update``: move ``subscription``'s mark-delete on one
    partition to ``position`` (never back; created at the earliest position if missing)."""

    topic: str
    partition: int = Field(ge=0)
    subscription: str = Field(min_length=1)
    position: PositionText


class AckExport(StrictBody):
    """``POST /v1/replication/acks/export``: one partition of a subscription: its acks past
    ``after`` (None: ``back`` entries before its mark-delete), by origin.

    ``known`` is the ``token`` of an earlier answer: if nothing changed since, ``origins`` is None.
    """

    topic: str
    partition: int = Field(ge=0)
    subscription: str = Field(min_length=1)
    after: PositionText | None = None
    back: int = Field(default=10_000, ge=0)
    known: str | None = None


class ExportedAcks(StrictBody):
    """The answer to ``acks/export``: ``token`` names this state of the subscription's cursor;
    ``origins`` (:meth:`~streamtx.contracts.ackset.AckSet.to_wire`) is None when the caller's
    ``known`` token is still current."""

    token: str
    origins: list[dict[str, Any]] | None = None


class AckApply(StrictBody):
    """``POST /v1/replication/acks/apply``: acknowledge on one partition of ``subscription`` the
    messages ``origins`` names (:meth:`streamtx.contracts.ackset.AckSet.to_wire`).

    ``start`` (the ``next`` of an earlier answer): look only from there on, for a retry
    of a marker whose entries were not all here yet. The answer's ``complete`` says
    whether every origin's last named entry was found (``missing``: the origins not,
    as ``[cluster, ledger]``) and ``next`` where a retry starts.
    """

    topic: str
    partition: int = Field(ge=0)
    subscription: str = Field(min_length=1)
    origins: AckOrigins
    start: PositionText | None = None


class AppliedAcks(StrictBody):
    """The answer to ``acks/apply``: ``acked`` messages acknowledged now; ``complete`` false when
    entries an origin names are not here yet (``missing``: ``[cluster, ledger]`` each), and
    ``next``, where a retry starts."""

    subscription: str
    acked: int = Field(ge=0)
    complete: bool
    missing: list[list[str | int]] = Field(default_factory=list)
    next: str | None = None

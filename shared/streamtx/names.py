"""Names clients choose - tenant, namespace, topic, subscription - checked as Pulsar checks them. Pure.

Pulsar's ``NamedEntity`` rule: letters, digits and ``- _ = : .`` (ASCII), here
also at most :data:`max_name_chars` characters and never empty. A topic name
is ``persistent://{tenant}/{namespace}/{topic}``; a partition's local name ends
in ``-partition-{i}``, so a topic created by name may not contain
``-partition-`` itself (Pulsar refuses those too). Anything else - control
characters, private-use code points, ``/``, spaces - is a 400 before a ledger,
a cursor or a log record is made for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, NamedTuple

from pydantic import StringConstraints

from streamtx.errors import MalformedError

max_name_chars = 255
MAX_PARTITIONS = 1024  # partitions one topic may have
_chars = r"[-=:.A-Za-z0-9_]"
_name = re.compile(f"{_chars}{{1,{max_name_chars}}}")
_scheme = "persistent://"
PARTITION_SUFFIX = "-partition-"

#: The same rules as pydantic string types, for request bodies (documented in OpenAPI).
NAME_PATTERN = f"^{_chars}{{1,{max_name_chars}}}$"
TOPIC_PATTERN = f"^persistent://{_chars}{{1,{max_name_chars}}}(/{_chars}{{1,{max_name_chars}}}){{2}}$"
TopicName = Annotated[str, StringConstraints(pattern=TOPIC_PATTERN)]
#: A partition's full name, ``persistent://t/n/x-partition-N``: what a transaction registers, and
#: all a broker can end (every topic is partitioned; its name alone is refused with 400).
PARTITION_PATTERN = TOPIC_PATTERN.removesuffix("$") + r"-partition-(?:0|[1-9][0-9]{0,3})$"
PartitionName = Annotated[str, StringConstraints(pattern=PARTITION_PATTERN)]
SubscriptionName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


#: Names the services give their own producers and cursors (Pulsar's: the replicator's producer and
#: cursor ``pulsar.repl.<cluster>``, broker/replication/state.py; Pulsar also takes ``pulsar.dedup``).
#: The whole ``pulsar.`` prefix is reserved so a later internal name cannot collide with a client's.
RESERVED_PREFIXES = ("pulsar.",)


def is_reserved(name: str) -> bool:
    """A producer or subscription name only the services may use (:data:`RESERVED_PREFIXES`)."""
    return name.startswith(RESERVED_PREFIXES)


def check_name(kind: str, name: str) -> str:
    """``name`` when it is a valid ``kind`` (tenant, namespace, topic, subscription) name; else 400."""
    if _name.fullmatch(name) is None:
        raise MalformedError(f"{kind} name {_shown(name)} is not 1-{max_name_chars} characters of "
                             "letters, digits and - _ = : .")
    return name


def topic_name(tenant: str, namespace: str, topic: str) -> str:
    """``persistent://tenant/namespace/topic`` of checked parts (400 when one is not a valid name)."""
    return f"{_scheme}{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/" \
        f"{check_name('topic', topic)}"


def check_topic(name: str) -> str:
    """A full topic (or partition) name, ``persistent://t/n/x``, checked part by part; else 400."""
    parts = name.removeprefix(_scheme).split("/") if name.startswith(_scheme) else []
    if len(parts) != 3:
        raise MalformedError(f"topic {_shown(name)} is not persistent://tenant/namespace/topic")
    return topic_name(*parts)


def check_new_topic(local: str) -> str:
    """A topic's local name fit for creating a partitioned topic: no partition suffix in it."""
    if PARTITION_SUFFIX in check_name("topic", local):
        raise MalformedError(f"topic name {local!r} may not contain {PARTITION_SUFFIX!r} "
                             "(partitions are named so)")
    return local


def _shown(name: str) -> str:
    # ascii(): control characters and private-use code points are shown escaped in the message.
    return ascii(name[:80] + ("..." if len(name) > 80 else ""))


@dataclass(frozen=True, slots=True, order=True)
class Partition:
    """One partition of a topic: ``topic`` is the topic's full name, never a partition's.

    ``str()`` is the partition's own name, ``persistent://t/n/x-partition-{index}``: the one
    place that name is formatted (:meth:`parse` the one place it is read).
    """

    topic: str
    index: int

    def __str__(self) -> str:
        return f"{self.topic}{PARTITION_SUFFIX}{self.index}"

    @classmethod
    def parse(cls, name: str) -> Partition | None:
        """The partition ``name`` names (``...x-partition-3``); None for a topic's own name."""
        base, sep, index = name.rpartition(PARTITION_SUFFIX)
        if sep and index.isdigit():
            return cls(base, int(index))
        return None


def partition_name(topic: str, index: int) -> str:
    """The name of partition ``index`` of ``topic`` (the topic's full name)."""
    return str(Partition(topic, index))


def split_partition(name: str) -> tuple[str, int | None]:
    """``persistent://t/n/x-partition-3`` -> (``persistent://t/n/x``, 3); else (name, None)."""
    part = Partition.parse(name)
    return (name, None) if part is None else (part.topic, part.index)


def topic_of(name: str) -> str:
    """The topic a topic's or a partition's name belongs to: the name without its partition."""
    return split_partition(name)[0]


class TopicSubscription(NamedTuple):
    """A subscription of a topic: ``topic`` is always the topic's name, never a partition's,
    so acks sent under either name of one partition meet in one place (issue 32 defect 1).
    A tuple, so ``(topic, subscription)`` pairs of older code compare and hash equal to it."""

    topic: str
    subscription: str

    @classmethod
    def of(cls, name: str, subscription: str) -> TopicSubscription:
        """The subscription named under a topic's name or under one of its partitions' names."""
        return cls(topic_of(name), subscription)

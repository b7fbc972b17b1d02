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
from typing import Annotated

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

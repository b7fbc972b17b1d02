"""Search-log records: the demo's payload, and how they travel as messages.

One record is what a search front end logs for one request (docs/background.md): a user
id, the request text, the source partition it was written to and a sequence
number per source partition (0, 1, 2, ... without gaps), and the wall-clock time
the generator sent it. The value is compact JSON padded with spaces to
``record_size`` bytes (200 by default, as in the talk's "small records")::

    {"u": <user id>, "p": <source partition>, "s": <seq>, "t": <sent at, ms>, "q": "<request>"}

The message key is the user id (``u%08d``) so keyed routing and the range
partitioner agree on what a record belongs to.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from streamtx.demo.partitioner import source_partition_of

if TYPE_CHECKING:
    from streamtx.demo.layout import RunConfig

record_size = 200  # bytes per encoded value, padding included

_words = (
    "где поесть", "купить смартфон", "купить ноутбук", "что почитать", "погода завтра",
    "cheap flights", "python asyncio", "exactly once", "pulsar transactions", "kafka vs ydb",
    "рецепт борща", "новости", "курс рубля", "map of lisbon", "best headphones",
)


@dataclass(frozen=True, slots=True)
class SearchRecord:
    """One logged search request."""

    user_id: int
    src_partition: int
    seq: int
    sent_at_ms: int
    request: str

    @property
    def key(self) -> str:
        return user_key(self.user_id)


def user_key(user_id: int) -> str:
    return f"u{user_id:08d}"


def encode(record: SearchRecord, size: int = record_size) -> bytes:
    """The record as padded JSON; longer than ``size`` only if the request is."""
    body = json.dumps(
        {"u": record.user_id, "p": record.src_partition, "s": record.seq,
         "t": record.sent_at_ms, "q": record.request},
        ensure_ascii=False, separators=(",", ":"),
    ).encode()
    return body + b" " * (size - len(body)) if len(body) < size else body


def decode(value: bytes) -> SearchRecord:
    """Inverse of :func:`encode`; raises ``ValueError`` on anything else."""
    try:
        # orjson, as the Kafka peer's workers decode the same records (bench/peer_kafka.py): the
        # stdlib's decoder was a sixth of a worker's CPU.
        d = orjson.loads(value)
        return SearchRecord(int(d["u"]), int(d["p"]), int(d["s"]), int(d["t"]), str(d["q"]))
    except (KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a search record: {value[:60]!r}") from exc


def read(value: bytes) -> tuple[int, int, int, int]:
    """``(user id, source partition, seq, sent at ms)`` of an encoded record: what a worker
    routes and orders by, without a :class:`SearchRecord` (the request text is not needed,
    and the frozen dataclass cost twice the JSON decode). Raises as :func:`decode` does."""
    try:
        d = orjson.loads(value)
        return int(d["u"]), int(d["p"]), int(d["s"]), int(d["t"])
    except (KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a search record: {value[:60]!r}") from exc


def key_bytes(user_id: int) -> bytes:
    """:func:`user_key`, utf-8: as an output's key goes on the wire."""
    return b"u%08d" % user_id


def next_record(rng: random.Random, cfg: RunConfig, seqs: list[int], sent_at_ms: int) -> SearchRecord:
    """The next record a front end logs: a random user on its source partition, with that
    partition's next sequence number (``seqs`` is advanced)."""
    user = rng.randrange(cfg.user_space)
    p = source_partition_of(user, cfg.source_partitions)
    rec = SearchRecord(user, p, seqs[p], sent_at_ms, random_request(rng))
    seqs[p] += 1
    return rec


def random_request(rng: random.Random) -> str:
    return f"{rng.choice(_words)} {rng.randrange(10_000)}"

"""The binary batch wire format, ``application/x-streamtx-batch``: produce, fetch, acks. Pure, no I/O.

JSON stays the default (curl, every existing client); a client opts in with
``Content-Type`` on produce and acks and ``Accept`` on fetch. The point is the
broker's cost: a produced section is validated by a walk over its bytes and
stored as the partition entry's message area *as is* (the broker only puts its
entry header in front: publish time, producer identity, txn id), and a fetch
hands stored entries out as they are. So the message layout (:mod:`.messages`) is exactly
the one of the partition entry codec (``streamtx.records.partition``) after its header.

The format lives in one module per part, each documenting the layout it encodes
and decodes; this module is its front door (callers import the format from here,
or from the part they need):

- :mod:`streamtx.wire.frame`: the prelude every body starts with, the content type;
- :mod:`streamtx.wire.messages`: the message area (the stored layout), its encoder,
  decoder and validator;
- :mod:`streamtx.wire.produce`: the produce request and its *produced* answer;
- :mod:`streamtx.wire.fetch`: the *messages* answer of a fetch;
- :mod:`streamtx.wire.acks`: the acks request.
"""

from __future__ import annotations

from streamtx.wire.acks import Acks, decode_acks, encode_acks
from streamtx.wire.fetch import (
    Delivered,
    Received,
    Values,
    decode_messages_answer,
    decode_values,
    encode_messages_answer,
)
from streamtx.wire.frame import ACKS, CONTENT_TYPE, MAGIC, MESSAGES, PRODUCE, PRODUCED, VERSION, is_batch
from streamtx.wire.messages import (
    Fields,
    Msg,
    decode_fields,
    decode_messages,
    encode_fields,
    encode_keyed,
    encode_messages,
    message_at,
    validate_messages,
)
from streamtx.wire.produce import (
    Produce,
    Section,
    decode_produce,
    decode_produced,
    encode_produce,
    encode_produce_bodies,
    encode_produce_keyed,
    encode_produce_routed,
    encode_produced,
    ids_in_request_order,
    message_ids,
)

__all__ = [
    "ACKS",
    "CONTENT_TYPE",
    "MAGIC",
    "MESSAGES",
    "PRODUCE",
    "PRODUCED",
    "VERSION",
    "Acks",
    "Delivered",
    "Fields",
    "Msg",
    "Produce",
    "Received",
    "Section",
    "Values",
    "decode_acks",
    "decode_fields",
    "decode_messages",
    "decode_messages_answer",
    "decode_produce",
    "decode_produced",
    "decode_values",
    "encode_acks",
    "encode_fields",
    "encode_keyed",
    "encode_messages",
    "encode_messages_answer",
    "encode_produce",
    "encode_produce_bodies",
    "encode_produce_keyed",
    "encode_produce_routed",
    "encode_produced",
    "ids_in_request_order",
    "is_batch",
    "message_at",
    "message_ids",
    "validate_messages",
]

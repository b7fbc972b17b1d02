"""Helpers of the tests that drive one topic on a memory broker (``conftest.broker``)."""

from __future__ import annotations

from streamtx.broker.topic import Outgoing, Topic
from streamtx.records.partition import Message
from streamtx.records.pendingack import MessageId

T = "persistent://t/n/u"
ACK_TIMEOUT_MS = 50


def mids(*texts: str) -> list[MessageId]:
    return [MessageId.parse(t) for t in texts]


async def send(topic: Topic, *values: str) -> list[str]:
    """One produce: one entry (a batch when there are several values); its message ids."""
    return await topic.produce([Outgoing(Message(v.encode(), request_index=i), 0)
                                for i, v in enumerate(values)], None, None)

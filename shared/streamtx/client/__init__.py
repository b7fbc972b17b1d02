"""The streamtx Python SDK: producers, consumers and transactions over the REST API.

    async with StreamtxClient("http://127.0.0.1:8081") as client:
        consumer = await client.consumer("persistent://t/n/in", "sub", "earliest")
        producer = await client.producer("persistent://t/n/out", name="resharder")
        async with client.transaction(timeout_ms=30_000) as txn:
            for m in await consumer.receive(max=100, wait_ms=500):
                await producer.send(transform(m.value), key=m.key, txn=txn)
                await consumer.ack([m], txn=txn)

:class:`AdminClient` wraps the admin API; ``streamtx-admin`` is its CLI.
"""

from streamtx.client.admin import AdminClient
from streamtx.client.client import StreamtxClient
from streamtx.client.consumer import Consumer, Message
from streamtx.client.http import AuthError
from streamtx.client.producer import OutMessage, Producer
from streamtx.client.transaction import Transaction

__all__ = [
    "AdminClient",
    "AuthError",
    "Consumer",
    "Message",
    "OutMessage",
    "Producer",
    "StreamtxClient",
    "Transaction",
]

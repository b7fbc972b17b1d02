"""The admin API (Pulsar's ``/admin/v2`` topics and ``/admin/v3/transactions``), per service."""

from __future__ import annotations

from typing import Any

from streamtx.client.client import StreamtxClient
from streamtx.client.names import path_of
from streamtx.contracts import TxnId

_v3 = "/admin/v3/transactions"


def _txn_path(txn_id: str) -> str:
    txn = TxnId.parse(txn_id)  # MalformedError for anything the services would refuse
    return f"{txn.most}/{txn.least}"


class AdminClient:
    """Admin calls, each sent to the service that owns it (found via ``/v1/cluster``)."""

    def __init__(self, client: StreamtxClient) -> None:
        self._client = client

    # --- broker --------------------------------------------------------------

    async def create_topic(self, topic: str, partitions: int) -> Any:
        return await self._client.broker.call(
            "PUT", f"/admin/v2/persistent/{path_of(topic)}/partitions", json={"partitions": partitions}
        )

    async def get_topic(self, topic: str) -> Any:
        return await self._client.broker.call("GET", f"/admin/v2/persistent/{path_of(topic)}/partitions")

    async def buffer_stats(self, topic: str) -> Any:
        """``transactionBufferStats`` of one partition (``persistent://t/n/x-partition-0``)."""
        return await self._client.broker.call("GET", f"{_v3}/transactionBufferStats/{path_of(topic)}")

    # --- geo-replication (answered on the broker, done by the replication controller) ---

    async def list_clusters(self) -> Any:
        return await self._client.broker.call("GET", "/admin/v2/clusters")

    async def get_cluster(self, name: str) -> Any:
        return await self._client.broker.call("GET", f"/admin/v2/clusters/{name}")

    async def put_cluster(self, name: str, service_url: str) -> Any:
        """Register peer cluster ``name``, reachable at any of its services' URLs."""
        return await self._client.broker.call("PUT", f"/admin/v2/clusters/{name}",
                                              json={"service_url": service_url})

    async def delete_cluster(self, name: str) -> Any:
        return await self._client.broker.call("DELETE", f"/admin/v2/clusters/{name}")

    async def delete_subscription(self, topic: str, subscription: str, *, force: bool = False) -> Any:
        """Unsubscribe: 409 while consumers are connected (unless ``force``) or open transactions
        hold acks on it."""
        return await self._client.broker.call(
            "DELETE", f"/v1/topics/{path_of(topic)}/subscriptions/{subscription}",
            params={"force": "true"} if force else None)

    async def set_namespace_replication(self, namespace: str, clusters: list[str]) -> Any:
        """Where namespace ``tenant/ns`` replicates: these clusters."""
        return await self._client.broker.call("POST", f"/admin/v2/namespaces/{namespace}/replication",
                                              json=clusters)

    async def get_namespace_replication(self, namespace: str) -> Any:
        return await self._client.broker.call("GET", f"/admin/v2/namespaces/{namespace}/replication")

    async def set_topic_replication(self, topic: str, clusters: list[str]) -> Any:
        return await self._client.broker.call("POST", f"/admin/v2/persistent/{path_of(topic)}/replication",
                                              json=clusters)

    async def get_topic_replication(self, topic: str) -> Any:
        return await self._client.broker.call("GET", f"/admin/v2/persistent/{path_of(topic)}/replication")

    async def topic_stats(self, topic: str) -> Any:
        """Topic stats, with ``replication`` per remote cluster."""
        return await self._client.broker.call("GET", f"/admin/v2/persistent/{path_of(topic)}/stats")

    # --- coordinator -----------------------------------------------------------

    async def coordinator_stats(self) -> Any:
        return await self._client.coordinator.call("GET", f"{_v3}/coordinatorStats")

    async def coordinator_internal_stats(self, coordinator_id: int) -> Any:
        return await self._client.coordinator.call("GET", f"{_v3}/coordinatorInternalStats/{coordinator_id}")

    async def transaction_metadata(self, txn_id: str) -> Any:
        return await self._client.coordinator.call("GET", f"{_v3}/transactionMetadata/{_txn_path(txn_id)}")

    async def slow_transactions(self, timeout_ms: int) -> Any:
        return await self._client.coordinator.call("GET", f"{_v3}/slowTransactions/{timeout_ms}")

    async def protocol_violations(self) -> Any:
        """Transactions a participant had ended the other way (it answered the end 409)."""
        return await self._client.coordinator.call("GET", f"{_v3}/protocolViolations")

    async def set_tc_batch_log(self, enabled: bool) -> Any:
        return await self._client.coordinator.call("POST", f"{_v3}/tcBatchLog", json={"enabled": enabled})

    async def get_tc_batch_log(self) -> Any:
        return await self._client.coordinator.call("GET", f"{_v3}/tcBatchLogStat")

    # --- pending-ack store -----------------------------------------------------

    async def set_pending_ack_batch_log(self, enabled: bool) -> Any:
        pendingack = self._client.endpoint("pendingack")
        return await pendingack.call("POST", f"{_v3}/pendingAckBatchLog", json={"enabled": enabled})

    async def get_pending_ack_batch_log(self) -> Any:
        return await self._client.endpoint("pendingack").call("GET", f"{_v3}/pendingAckBatchLogStat")

    async def pending_ack_stats(self, topic: str, subscription: str) -> Any:
        return await self._client.endpoint("pendingack").call(
            "GET", f"{_v3}/pendingAckStats/{path_of(topic)}/{subscription}"
        )

    async def pending_ack_internal_stats(self, topic: str, subscription: str) -> Any:
        return await self._client.endpoint("pendingack").call(
            "GET", f"{_v3}/pendingAckInternalStats/{path_of(topic)}/{subscription}"
        )

"""The replication controller: geo-replication of topics and replicated subscriptions (PIP-33)."""

"""The replication controller's routes."""

"""The pending-ack store's HTTP routes: one module per resource."""

"""The transaction coordinator (TC) service: transaction lifecycle, the batched
transaction log, recovery, timeouts, end fan-out, admin v3 and metrics.

Run it with ``python -m streamtx.coordinator``; settings are ``STREAMTX_*``
environment variables (see :mod:`streamtx.coordinator.settings`).
"""

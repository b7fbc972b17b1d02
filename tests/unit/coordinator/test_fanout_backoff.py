"""A restarted participant gets the ends it missed within a moment, not seconds (issue 25)."""

from __future__ import annotations

import pytest

from streamtx.coordinator.coordinator import CoordinatorConfig
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.transport import RetryPolicy


def test_a_participant_back_after_a_crash_waits_at_most_three_quarters_of_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("STREAMTX_FANOUT_BACKOFF_MS", "STREAMTX_FANOUT_MAX_BACKOFF_MS"):
        monkeypatch.delenv(name, raising=False)
    settings = CoordinatorSettings()  # type: ignore[call-arg]
    policy = RetryPolicy(attempts=None, backoff_s=settings.fanout_backoff_ms / 1000,
                         max_backoff_s=settings.fanout_max_backoff_ms / 1000)
    # Every transaction that touched a restarted broker or pending-ack store waits for its end
    # (held acks, a partition's read position): with a 5 s cap, a participant back 3 s after
    # its crash was told up to 7.5 s (1.5 x 5 s, jitter) later.
    worst_s = 1.5 * policy.max_backoff_s
    assert worst_s <= 0.75
    assert CoordinatorConfig().retry_max_backoff_ms == settings.fanout_max_backoff_ms  # the same default

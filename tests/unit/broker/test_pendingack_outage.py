"""A restarted broker's subscriptions wait for a pending-ack store that does not answer yet,
quietly: said once, and once when it answers (it was a warning per try and per subscription:
228 lines on a restart of the suite over existing data)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from streamtx.broker.pendingack_client import Outage, PendingAckClient


async def test_fifty_waiting_subscriptions_say_so_once(caplog: pytest.LogCaptureFixture) -> None:
    up, asked_enough = asyncio.Event(), asyncio.Event()
    refused = 0

    def store(request: httpx.Request) -> httpx.Response:
        nonlocal refused
        if not up.is_set():
            refused += 1
            if refused >= 200:  # every subscription asked several times
                asked_enough.set()
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"message_ids": []})

    client = PendingAckClient("http://store", 1.0)
    client._client._http._transport = httpx.MockTransport(store)  # the network, mocked
    caplog.set_level(logging.DEBUG, logger="streamtx.broker.pendingack_client")
    waits = [asyncio.create_task(client.held_when_answering("persistent://t/n/x", f"s{i}", max_delay_s=0.01))
             for i in range(50)]
    await asyncio.wait_for(asked_enough.wait(), 10)
    up.set()
    assert await asyncio.gather(*waits) == [([], []) for _ in range(50)]
    await client.aclose()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert len(said) == 2, said
    assert said[0][0] == logging.WARNING and "the pending-ack store does not answer yet" in said[0][1]
    assert said[1][0] == logging.INFO and "the pending-ack store answers again after" in said[1][1]


def test_a_long_outage_is_said_again_each_period_and_a_short_one_told_never_is_not_ended(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    outage = Outage("store", every_s=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="streamtx.broker.pendingack_client")
    for t in range(0, 130, 5):
        now[0] = float(t)
        outage.failed(RuntimeError("refused"))
    outage.answered()
    outage.answered()  # nothing more to say
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [
        "the store does not answer yet", "the store does not answer for 60 s",
        "the store does not answer for 120 s", "the store answers again after 125.0 s"]

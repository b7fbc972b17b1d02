"""A long poll knows why it ended: its client left (``gone``), or the service stops."""

from __future__ import annotations

import asyncio

from streamtx.service.longpoll import LongPolls


async def test_a_poll_whose_client_left_is_gone_and_one_the_service_ends_is_not() -> None:
    polls = LongPolls()
    left = asyncio.Event()
    async with polls.open(left.wait) as poll:
        ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        poll.watch(ended)
        left.set()  # receive() returned: the client disconnected
        await asyncio.wait_for(ended, 5)
        assert poll.ended and poll.gone
    async with polls.open(asyncio.Event().wait) as poll:
        polls.end_all()  # the service stops: the client is still there for the answer
        assert poll.ended and not poll.gone
    assert not poll.gone  # the handler answered first: its watcher was cancelled, not a departure

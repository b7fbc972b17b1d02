"""The Redis mailbox between workers, against a real redis-server: batches, takeover, failures."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as redis
from prometheus_client import REGISTRY

from streamtx.errors import UnavailableError
from streamtx.ownership.mailbox import Mailbox, encode_call
from streamtx.service.inprocess import Answer, Call
from tests.support.procs import free_port, redis_server
from tests.support.suite import eventually

MakeMailbox = Callable[..., Mailbox]


@pytest.fixture
async def mailboxes(redis_url: str) -> AsyncIterator[MakeMailbox]:
    cluster = f"m{uuid.uuid4().hex[:6]}"
    made: list[Mailbox] = []

    def make(consumer: str, *, url: str = redis_url, timeout_s: float = 10.0) -> Mailbox:
        box = Mailbox.from_url(url, cluster=cluster, service="tc", consumer=consumer, timeout_s=timeout_s,
                               max_batch=64)
        made.append(box)
        return box

    yield make
    for box in made:
        await box.aclose()


class Owner:
    """Serves calls by echoing them; remembers how many it served at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most_at_once = 0
        self.seen: list[str] = []

    async def serve(self, call: Call) -> Answer:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(0.01)  # a log append
        self.running -= 1
        self.seen.append(call.path)
        return Answer(200, [(b"x-path", call.path.encode())], call.method.encode() + b" " + call.body)


async def test_calls_reach_the_owner_and_are_served_together(mailboxes: MakeMailbox) -> None:
    caller, owner_box, owner = mailboxes("w0"), mailboxes("w1"), Owner()
    owner_box.own("3", owner.serve)
    calls = [Call("POST", f"/v1/transactions/{i}/commit", b"a=1", [(b"authorization", b"Bearer t")],
                  f"body {i}\n".encode()) for i in range(60)]
    answers = await asyncio.gather(*(caller.call("3", c) for c in calls))
    for i, answer in enumerate(answers):
        assert answer.status == 200 and answer.body == f"POST body {i}\n".encode()
        assert (b"x-path", f"/v1/transactions/{i}/commit".encode()) in answer.headers
    assert sorted(owner.seen) == sorted(c.path for c in calls)  # each once
    assert owner.most_at_once > 1  # served concurrently: their appends can share an entry
    assert await caller._r.xlen(caller.key("3")) == 0  # answered entries leave the stream
    # The metrics (the mailboxes' cluster label is this test's own).
    assert _sample("streamtx_mailbox_forwarded_total", caller, outcome="answered") == 60
    assert _sample("streamtx_mailbox_wait_seconds_count", caller, outcome="answered") == 60
    await eventually(lambda: _counted("streamtx_mailbox_served_total", owner_box, 60, replayed="false"),
                     what="60 served requests counted")
    batches = _sample("streamtx_mailbox_batch_requests_count", owner_box)
    assert _sample("streamtx_mailbox_batch_requests_sum", owner_box) == 60 and 1 <= batches < 60


async def test_a_new_owner_serves_what_a_dead_owner_read_and_never_answered(mailboxes: MakeMailbox) -> None:
    caller, heir = mailboxes("w0"), mailboxes("w2")
    key = caller.key("5")
    r = caller._r
    await r.xgroup_create(key, "owner", id="0", mkstream=True)
    waiting = [asyncio.create_task(caller.call("5", Call("POST", f"/v1/transactions/{i}/abort")))
               for i in range(5)]
    await eventually(lambda: _length(r, key, 5), what="five requests in the mailbox")
    # The dead owner read them (they are pending under its name) and died before answering.
    got = await r.xreadgroup("owner", "w1-dead", {key: ">"}, count=100)
    assert len(got[0][1]) == 5
    owner = Owner()
    heir.own("5", owner.serve)
    answers = await asyncio.gather(*waiting)
    assert [a.body for a in answers] == [b"POST "] * 5
    assert heir.replayed == 5
    await eventually(lambda: _counted("streamtx_mailbox_served_total", heir, 5, replayed="true"),
                     what="5 replayed requests counted")  # counted right after the answer is pushed
    assert sorted(owner.seen) == sorted(f"/v1/transactions/{i}/abort" for i in range(5))
    pending = await r.xpending(key, "owner")
    assert pending["pending"] == 0


async def test_an_owner_that_gives_an_item_up_leaves_new_requests_to_the_next(mailboxes: MakeMailbox) -> None:
    caller, first, second = mailboxes("w0"), mailboxes("w1"), mailboxes("w2")
    one, two = Owner(), Owner()
    first.own("7", one.serve)
    assert (await caller.call("7", Call("GET", "/a"))).status == 200
    await first.disown("7")
    later = asyncio.create_task(caller.call("7", Call("GET", "/b")))
    await asyncio.sleep(0.3)
    assert not later.done()  # nobody drains it now: it waits in the mailbox
    second.own("7", two.serve)
    assert (await later).status == 200
    assert one.seen == ["/a"] and two.seen == ["/b"]


async def test_no_owner_or_no_redis_is_503(mailboxes: MakeMailbox) -> None:
    alone = mailboxes("w0", timeout_s=0.3)
    with pytest.raises(UnavailableError, match="did not answer"):
        await alone.call("9", Call("GET", "/x"))
    assert _sample("streamtx_mailbox_forwarded_total", alone, outcome="timeout") == 1
    down = mailboxes("w0", url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(UnavailableError, match="Redis"):
        await down.call("9", Call("GET", "/x"))
    assert _sample("streamtx_mailbox_forwarded_total", down, outcome="error") == 1
    assert _sample("streamtx_mailbox_errors_total", down, side="caller", error="ConnectionError") == 1


async def test_the_first_answer_after_redis_restarts_reaches_its_caller(mailboxes: MakeMailbox) -> None:
    port = free_port()
    with redis_server(port) as url:
        caller, owner_box, owner = mailboxes("w0", url=url), mailboxes("w1", url=url), Owner()
        owner_box.own("2", owner.serve)
        assert (await caller.call("2", Call("GET", "/before"))).status == 200
    with redis_server(port):  # back, empty; every pooled connection is dead
        async def answered() -> bool:
            try:
                return (await caller.call("2", Call("GET", "/after"))).status == 200
            except UnavailableError as exc:
                assert "did not answer" not in exc.message  # an answer lost on a dead connection
                return False

        await eventually(answered, what="a call through the restarted Redis")


async def test_an_expired_request_is_dropped_unserved(mailboxes: MakeMailbox) -> None:
    owner_box, owner = mailboxes("w1"), Owner()
    key = owner_box.key("4")
    await owner_box._r.xadd(key, encode_call(Call("GET", "/stale"), "reply:none", 1))  # type: ignore[arg-type]
    owner_box.own("4", owner.serve)
    await eventually(lambda: _length(owner_box._r, key, 0), what="the stale request to leave the stream")
    assert owner.seen == []
    assert _sample("streamtx_mailbox_expired_total", owner_box) == 1


def _sample(name: str, box: Mailbox, **labels: str) -> float:
    cluster, service = box._labels
    return REGISTRY.get_sample_value(name, {"cluster": cluster, "service": service, **labels}) or 0.0


async def _counted(name: str, box: Mailbox, n: float, **labels: str) -> bool:
    return _sample(name, box, **labels) == n


async def _length(r: redis.Redis, key: str, n: int) -> bool:
    return bool(await r.xlen(key) == n)


async def test_a_slow_request_holds_up_no_other(mailboxes: MakeMailbox) -> None:
    caller, owner_box = mailboxes("w0"), mailboxes("w1")
    release = asyncio.Event()

    async def serve(call: Call) -> Answer:
        if call.path == "/slow":  # a commit whose participant keeps failing
            await release.wait()
        return Answer(200, [], call.path.encode())

    owner_box.own("8", serve)
    slow = asyncio.create_task(caller.call("8", Call("POST", "/slow")))
    await eventually(lambda: _in_flight(owner_box, "8"), what="the slow request to be served")
    assert (await caller.call("8", Call("POST", "/fast"))).body == b"/fast"
    assert not slow.done()
    release.set()
    assert (await slow).body == b"/slow"


async def _in_flight(box: Mailbox, item: str) -> bool:
    return bool(box._drains[item].serving)


async def test_a_full_mailbox_refuses_at_once_instead_of_growing(redis_url: str) -> None:
    """Issue 21 item 15: a mailbox had no cap; with its owner behind (or gone), every forwarded
    request stayed in the Redis stream. Past ``max_queued`` a call is refused at once (503)."""
    box = Mailbox.from_url(redis_url, cluster=f"m{uuid.uuid4().hex[:6]}", service="tc", consumer="w0",
                           timeout_s=5.0, max_batch=64, max_queued=2)
    try:
        def commit(i: int) -> Call:
            return Call("POST", f"/v1/transactions/9:{i}/commit", b"", [], b"")

        calls = [asyncio.create_task(box.call("9", commit(i))) for i in range(2)]

        async def queued() -> bool:
            return int(await box._r.xlen(box.key("9"))) == 2

        await eventually(queued, timeout_s=5, what="two requests queued")
        with pytest.raises(UnavailableError, match="holds 2 requests"):
            await asyncio.wait_for(box.call("9", commit(3)), 2)
        assert int(await box._r.xlen(box.key("9"))) == 2
        for c in calls:
            c.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
    finally:
        await box.aclose()

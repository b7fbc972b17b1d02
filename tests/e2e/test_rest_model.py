"""A stateful model test of the REST API on a running suite, auth on (issue 21 item 14).

Two clients of tenant ``a`` (subjects ``app-1`` and ``app-2``) make random calls straight over
HTTP, as API.md describes them: produce one message or a batch (plain or in a transaction,
theirs, the other's, an ended, unknown or unserved one), fetch, acks and nacks of ids delivered,
acked, never delivered, not yet written, of another ledger or malformed (individual or
cumulative, plain or in a transaction), transactions opened, registered, committed and aborted,
subscriptions created, deleted (plain or forced) and created again, consumers closed.
The pure model (tests/support/restmodel.py) says which answers each call may get and what it
changes; after every step the model's promises are checked against the services: what a fetch
hands out, what a drained subscription must have handed out, and every transaction as its owner
reads it (the other subject gets 403). A step creates a fresh subscription (from the earliest
position), creates one again (a no-op), or creates a deleted one again (it starts anew).

Bounded for CI (``STREAMTX_MODEL_STEPS``, default 300 steps, a fixed seed); ``make test-model`` runs
longer, with new draws each time (``STREAMTX_MODEL_RANDOM``).
"""

from __future__ import annotations

import base64
import itertools
import os
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from streamtx.auth import issue
from tests.support.restmodel import OPEN, Model, Sub
from tests.support.suite import Suite

SECRET = "model-secret-model-secret-model-0123"
ADMIN = issue(SECRET, subject="ops", roles=["admin"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])
SUBJECTS = ("app-1", "app-2")  # one tenant, two subjects: neither may touch the other's transactions
TOKENS = {s: issue(SECRET, subject=s, roles=["client"], tenants=["a"]) for s in SUBJECTS}
PARTITIONS = 2
STEPS = int(os.environ.get("STREAMTX_MODEL_STEPS", "300"))
STEPS_PER_RUN = 50
# Shrinking replays many runs against live services (minutes): asked for, not by default; a failing
# run is printed step by step either way.
PHASES = tuple(Phase) if os.environ.get("STREAMTX_MODEL_SHRINK") else (Phase.generate,)
# make test uses a fixed seed (a CI run fails on a change, not on a new draw); make test-model
# draws new calls each time, to find what the fixed ones do not.
RANDOM = bool(os.environ.get("STREAMTX_MODEL_RANDOM"))
UNKNOWN_TXNS = ("0:424242", "281474976710656:5")  # never opened; a coordinator id nobody serves
MALFORMED_IDS = ("L: 1", "L:-1", "x", "L:1:2:3", "", "L:1:-1")
#: What an ack names: delivered and out (most often), acked, delivered once, never delivered here,
#: not written yet, of another ledger, malformed.
ACK_KINDS = ("out",) * 5 + ("acked", "ever") + ("never",) * 3 + ("future", "foreign", "malformed")
#: Which transaction a produce or ack names: none, one of the caller's open ones, any, an unknown one.
TXN_PICKS = ("none",) * 3 + ("mine",) * 3 + ("any", "unknown")
#: Which one a call on a transaction names.
TXN_CALLS = ("mine",) * 4 + ("any", "unknown")
#: The calls a step makes, by weight.
ACTIONS = (("produce",) * 6 + ("fetch",) * 4 + ("ack",) * 6 + ("open_txn",) * 2 + ("register_partition",) * 2
           + ("register_subscription",) * 2 + ("end_txn",) * 3 + ("drain",) * 2
           + ("create_subscription",) * 2 + ("close_consumer", "nack", "delete_subscription"))
TXN_TIMEOUT_MS = 600_000  # far longer than a run: no transaction times out behind the model
_values = itertools.count()
T = TypeVar("T")
_steps: Counter[str] = Counter()  # calls made, by kind: a run must have made enough of each

pytestmark = pytest.mark.timeout(max(240, STEPS * 2))


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("model")
    env = {"STREAMTX_AUTH_JWT_SECRET": SECRET, "STREAMTX_SERVICE_TOKEN": SERVICE}
    # Nothing is redelivered by the ack timeout within a run (a second delivery is a finding),
    # and no consumer is forgotten as idle (a delete then answers as the model says).
    broker_env = {"STREAMTX_ACK_TIMEOUT_MS": "3600000", "STREAMTX_CONSUMER_IDLE_MS": "3600000"}
    with Suite(f"file://{tmp / 'ledgers'}", tmp, env=env, broker_env=broker_env) as running:
        yield running


class Api:
    """The calls, over one kept-alive HTTP client; every answer checked for the error shape."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.http = httpx.Client(timeout=30)

    def call(self, url: str, method: str, path: str, token: str, **kw: Any) -> httpx.Response:
        r = self.http.request(method, url + path, headers={"authorization": f"Bearer {token}"}, **kw)
        assert r.status_code < 500, f"{method} {path} {kw}: {r.status_code} {r.text}"
        if r.status_code >= 400:
            body = r.json()
            assert set(body) == {"error", "message"}, f"{method} {path}: error shape {body}"
        return r

    def tc(self, method: str, path: str, subject: str, **kw: Any) -> httpx.Response:
        return self.call(self.suite.coordinator.url, method, path, TOKENS[subject], **kw)

    def broker(self, method: str, path: str, subject: str, **kw: Any) -> httpx.Response:
        return self.call(self.suite.broker.url, method, path, TOKENS[subject], **kw)


def pick(data: st.DataObject, seq: Sequence[T], label: str) -> T:
    """One of ``seq`` (None when empty). The draw is the same whatever ``seq`` holds: what the
    model offers depends on the services' answers, and Hypothesis replays a run's draws only
    if their kinds and bounds do not (FlakyStrategyDefinition otherwise)."""
    i = data.draw(st.integers(0, 1 << 16), label=f"{label} (index)")
    got = seq[i % len(seq)] if seq else None
    note(f"{label}: {got!r}")
    return got  # type: ignore[return-value]


def subset(data: st.DataObject, seq: Sequence[T], label: str) -> set[T]:
    """Some of ``seq`` (at most 16 items), drawn as :func:`pick` draws."""
    mask = data.draw(st.integers(0, (1 << 16) - 1), label=f"{label} (mask)")
    got = {x for i, x in enumerate(seq[:16]) if mask >> i & 1}
    note(f"{label}: {sorted(got)!r}")
    return got


def expect(r: httpx.Response, allowed: set[int], what: str) -> int:
    assert r.status_code in allowed, f"{what}: {r.status_code} {r.text}, the model allows {sorted(allowed)}"
    return r.status_code


class RestModel(RuleBasedStateMachine):
    """Random calls of two subjects against one fresh topic per run, checked against :class:`Model`."""

    api: Api  # set by the test: the module's suite

    @initialize()
    def topic(self) -> None:
        self.model = Model(PARTITIONS)
        self.names = itertools.count(1)  # of fresh subscriptions (s0 is created here)
        self.gone: set[str] = set()  # deleted subscriptions' names
        self.broken = False
        self.topic_path = f"a/n/m{uuid.uuid4().hex[:8]}"
        self.name = f"persistent://{self.topic_path}"
        r = self.api.call(self.api.suite.broker.url, "PUT",
                          f"/admin/v2/persistent/{self.topic_path}/partitions", ADMIN,
                          json={"partitions": PARTITIONS})
        expect(r, {200}, "create topic")
        self._subscribe("app-1", "s0")

    def teardown(self) -> None:
        model = getattr(self, "model", None)
        try:
            if model is not None and not self.broken:  # the run ends: every subscription owes nothing
                for sub in sorted(model.subs):
                    self._drain("app-1", sub)
        finally:
            # Open transactions would hold their partitions and the client's open count past the run.
            for t in model.txns.values() if model is not None else ():
                if t.state == OPEN:
                    self.api.tc("POST", f"/v1/transactions/{t.txn_id}/abort", t.owner)

    # --- helpers ------------------------------------------------------------------------------

    def _subscribe(self, subject: str, sub: str) -> None:
        r = self.api.broker("PUT", f"/v1/topics/{self.topic_path}/subscriptions/{sub}", subject,
                            json={"initial_position": "earliest"})
        expect(r, {200}, f"create subscription {sub}")
        self.model.subs.setdefault(sub, Sub(sub))
        self.gone.discard(sub)

    def _fetch(self, subject: str, sub: str, max_messages: int, wait_ms: int) -> int:
        r = self.api.broker("GET", f"/v1/topics/{self.topic_path}/subscriptions/{sub}/messages", subject,
                            params={"max": max_messages, "wait_ms": wait_ms, "consumer": subject})
        expect(r, {200}, f"fetch {sub}")
        got = [(m["message_id"], int(m["partition"]), base64.b64decode(m["value"]).decode())
               for m in r.json()["messages"]]
        wrong = self.model.fetched(sub, subject, got)
        assert not wrong, "\n".join(wrong)
        return len(got)

    def _txn(self, data: st.DataObject, subject: str, which: str) -> str | None:
        """A transaction id for a call by ``subject``: none, one of its open ones (most often, as a
        client works), any the model knows (the other's, ended ones), or one never opened."""
        if which == "none":
            return None
        mine = sorted(t.txn_id for t in self.model.txns.values() if t.owner == subject and t.state == OPEN)
        known = sorted(self.model.txns)
        if which == "mine" and mine:
            return pick(data, mine, "own open txn")
        if which in ("mine", "any") and known:
            return pick(data, known, "txn")
        return pick(data, UNKNOWN_TXNS, "unknown txn")

    def _ack_ids(self, data: st.DataObject, sub: str, kind: str) -> list[str] | None:
        s, m = self.model.subs[sub], self.model
        pool: list[str]
        if kind == "out":
            pool = sorted(s.out)
        elif kind == "acked":
            pool = sorted(s.acked)
        elif kind == "ever":
            pool = sorted(s.ever)
        elif kind == "never":
            pool = sorted(i for i in m.msgs if i not in s.ever)
        elif kind == "future":
            pool = [f"{lid}:{max((x.pos[1] for x in m.msgs.values() if x.partition == p), default=0) + k}"
                    for p, lid in m.ledgers.items() for k in (1, 3, 5, 1_000_000_000_000)]
        elif kind == "foreign":
            pool = [f"{max(m.ledgers.values(), default=0) + 1000}:0"]
        else:
            pool = list(MALFORMED_IDS)
        got = pick(data, pool, f"{kind} id")
        return None if got is None else [got]

    # --- the calls ----------------------------------------------------------------------------

    @rule(action=st.sampled_from(ACTIONS), data=st.data())
    def call(self, action: str, data: st.DataObject) -> None:
        """One call, picked by weight (one rule rather than one per call: Hypothesis' swarm testing
        switches rules off per run, which left most runs without produces or acks)."""
        self.broken = True  # until the call returns: a failed run is not drained at its end
        getattr(self, action)(data)
        self.broken = False
        _steps[action] += 1


    def produce(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        txn = data.draw(st.sampled_from(TXN_PICKS), label="txn")
        txn_id = self._txn(data, subject, txn)
        t = self.model.txns.get(txn_id or "")
        # Into a transaction, mostly where it registered (a client registers before it writes).
        prefer = data.draw(st.integers(0, 4), label="prefer registered")  # drawn whatever the state
        registered = sorted(t.partitions) if t is not None and prefer else []
        partition = pick(data, registered or list(range(PARTITIONS)), "partition")
        count = data.draw(st.sampled_from((1, 1, 2, 3)), label="messages")  # 2, 3: one batched entry
        values = [f"v{next(_values)}" for _ in range(count)]
        messages = [{"value": base64.b64encode(v.encode()).decode(), "partition": partition} for v in values]
        body: dict[str, Any] = {"messages": messages}
        if txn_id is not None:
            body["txn_id"] = txn_id
        r = self.api.broker("POST", f"/v1/topics/{self.topic_path}/messages", subject, json=body)
        if expect(r, self.model.produce_expect(subject, txn_id, partition),
                  f"{subject} produces {count} to {partition} in {txn_id}") == 200:
            ids = r.json()["message_ids"]
            assert len(ids) == count, f"{count} messages produced, ids {ids}"
            for mid, value in zip(ids, values, strict=True):
                self.model.produced(mid, partition, value, txn_id)

    def fetch(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        max_messages = data.draw(st.integers(1, 5), label="max_messages")
        sub = pick(data, sorted(self.model.subs), "sub")
        if sub is not None:
            self._fetch(subject, sub, max_messages, 0)

    def drain(self, data: st.DataObject) -> None:
        """Fetch until nothing comes: every message the subscription owes must have come."""
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        sub = pick(data, sorted(self.model.subs), "sub")
        if sub is not None:
            self._drain(subject, sub)

    def _drain(self, subject: str, sub: str) -> None:
        for _ in range(50):
            if not self._fetch(subject, sub, 100, 0):
                break
        while self._fetch(subject, sub, 100, 100):  # and nothing arrives a little later either
            pass
        owed = self.model.required(sub)
        assert not owed, f"{sub}: committed, never acked, never delivered: " + ", ".join(
            f"{m.mid} ({m.value}, txn {m.txn})" for m in owed)

    def ack(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        cumulative = data.draw(st.booleans(), label="cumulative")
        kind = data.draw(st.sampled_from(ACK_KINDS), label="kind")
        txn = data.draw(st.sampled_from(TXN_PICKS), label="txn")
        txn_id = self._txn(data, subject, txn)
        t = self.model.txns.get(txn_id or "")
        subs = sorted(self.model.subs)
        if kind == "out":  # of a subscription something is out on, where there is one
            subs = [n for n in subs if self.model.subs[n].out] or subs
        registered = [n for n in subs if t is not None and n in t.subs]
        sub = pick(data, registered if data.draw(st.integers(0, 4)) and registered else subs, "sub")
        if sub is None:
            return
        ids = self._ack_ids(data, sub, kind)
        if ids is None:
            return
        body: dict[str, Any] = {"message_ids": ids, "cumulative": cumulative}
        if txn_id is not None:
            body["txn_id"] = txn_id
        allowed = self.model.ack_expect(subject, sub, ids, txn_id, cumulative)
        r = self.api.broker("POST", f"/v1/topics/{self.topic_path}/subscriptions/{sub}/acks", subject,
                            json=body)
        status = expect(r, allowed, f"{subject} acks {ids} ({kind}) on {sub}, cumulative={cumulative}, "
                                    f"txn {txn_id}")
        self.model.acked(sub, ids, txn_id, cumulative, status)

    def nack(self, data: st.DataObject) -> None:
        """A negative ack: what was out is delivered again (at once: no ack timeout runs out here)."""
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        kind = data.draw(st.sampled_from(ACK_KINDS), label="kind")
        subs = sorted(self.model.subs)
        if kind == "out":
            subs = [n for n in subs if self.model.subs[n].out] or subs
        sub = pick(data, subs, "sub")
        ids = self._ack_ids(data, sub, kind) if sub is not None else None
        if sub is None or ids is None:
            return
        r = self.api.broker("POST", f"/v1/topics/{self.topic_path}/subscriptions/{sub}/nacks", subject,
                            json={"message_ids": ids})
        status = expect(r, self.model.nack_expect(sub, ids), f"{subject} nacks {ids} ({kind}) on {sub}")
        self.model.nacked(sub, ids, status)

    def open_txn(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        r = self.api.tc("POST", "/v1/transactions", subject, json={"timeout_ms": TXN_TIMEOUT_MS})
        expect(r, {200}, f"{subject} opens a transaction")
        txn_id = r.json()["txn_id"]
        self.model.opened(txn_id, subject)
        # As a client does: register where it will write and ack now (some, most often all).
        partitions = subset(data, list(range(PARTITIONS)), "partitions")
        subs = subset(data, sorted(self.model.subs), "subscriptions")
        if partitions:
            r = self.api.tc("POST", f"/v1/transactions/{txn_id}/partitions", subject,
                            json={"partitions": [f"{self.name}-partition-{p}" for p in sorted(partitions)]})
            expect(r, {200}, f"{subject} registers partitions {partitions} in {txn_id}")
            self.model.txns[txn_id].partitions |= partitions
        if subs:
            named = [{"topic": self.name, "subscription": s} for s in sorted(subs)]
            r = self.api.tc("POST", f"/v1/transactions/{txn_id}/subscriptions", subject,
                            json={"subscriptions": named})
            expect(r, {200}, f"{subject} registers subscriptions {subs} in {txn_id}")
            self.model.txns[txn_id].subs |= subs

    def register_partition(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        partition = data.draw(st.integers(0, PARTITIONS - 1), label="partition")
        txn = data.draw(st.sampled_from(TXN_CALLS), label="txn")
        txn_id = self._txn(data, subject, txn)
        assert txn_id is not None
        r = self.api.tc("POST", f"/v1/transactions/{txn_id}/partitions", subject,
                        json={"partitions": [f"{self.name}-partition-{partition}"]})
        if expect(r, self.model.register_expect(subject, txn_id),
                  f"{subject} registers partition {partition} in {txn_id}") == 200:
            self.model.txns[txn_id].partitions.add(partition)

    def register_subscription(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        txn = data.draw(st.sampled_from(TXN_CALLS), label="txn")
        txn_id = self._txn(data, subject, txn)
        assert txn_id is not None
        sub = pick(data, sorted(self.model.subs), "sub")
        if sub is None:
            return
        r = self.api.tc("POST", f"/v1/transactions/{txn_id}/subscriptions", subject,
                        json={"subscriptions": [{"topic": self.name, "subscription": sub}]})
        if expect(r, self.model.register_expect(subject, txn_id),
                  f"{subject} registers subscription {sub} in {txn_id}") == 200:
            self.model.txns[txn_id].subs.add(sub)

    def end_txn(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        commit = data.draw(st.booleans(), label="commit")
        txn = data.draw(st.sampled_from(TXN_CALLS), label="txn")
        txn_id = self._txn(data, subject, txn)
        assert txn_id is not None
        r = self.api.tc("POST", f"/v1/transactions/{txn_id}/{'commit' if commit else 'abort'}", subject)
        status = expect(r, self.model.end_expect(subject, txn_id, commit),
                        f"{subject} {'commits' if commit else 'aborts'} {txn_id}")
        if status == 200:
            self.model.ended(txn_id, commit)
        elif status == 409 and self.model.txns[txn_id].state == OPEN:
            # A prepare found an overlapping ack: the transaction is aborted (its end must finish).
            state = self._state_once_ended(txn_id)
            assert state == "ABORTED", f"commit of {txn_id} answered 409, then it is {state}"
            self.model.ended(txn_id, commit=False)

    def _state_once_ended(self, txn_id: str) -> str:
        owner = self.model.txns[txn_id].owner
        for _ in range(100):
            state = str(self.api.tc("GET", f"/v1/transactions/{txn_id}", owner).json()["state"])
            if state not in ("ABORTING", "COMMITTING"):
                return state
        return state

    def create_subscription(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        fresh = data.draw(st.booleans(), label="fresh")
        again = pick(data, sorted(self.model.subs.keys() | self.gone), "sub")
        if (fresh or again is None) and len(self.model.subs) < 6:
            self._subscribe(subject, f"s{next(self.names)}")
        elif again is not None:  # an existing one: no cursor moves; a deleted one starts anew
            self._subscribe(subject, again)

    def close_consumer(self, data: st.DataObject) -> None:
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        sub = pick(data, sorted(self.model.subs), "sub")
        if sub is None:
            return
        r = self.api.broker("DELETE", f"/v1/topics/{self.topic_path}/subscriptions/{sub}/consumers/{subject}",
                            subject)
        expect(r, {200}, f"{subject} closes its consumer of {sub}")
        self.model.consumer_closed(sub, subject)

    def delete_subscription(self, data: st.DataObject) -> None:
        """Unsubscribe one that exists, one deleted before, or one never created."""
        subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
        force = data.draw(st.booleans(), label="force")
        held = sorted({n for t in self.model.txns.values() if t.state == OPEN
                       for n, ids in t.holds.items() if ids})  # more often: the 409 it must get
        sub = pick(data, [*sorted(self.model.subs)] * 3 + held * 3 + sorted(self.gone) + ["never"], "sub")
        r = self.api.broker("DELETE", f"/v1/topics/{self.topic_path}/subscriptions/{sub}", subject,
                            params={"force": str(force).lower()})
        if expect(r, self.model.delete_expect(sub, force),
                  f"{subject} deletes {sub} (force={force})") == 200:
            self.model.deleted(sub)
            self.gone.add(sub)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def transactions_as_their_owners_made_them(self) -> None:
        """Each transaction is as its owner's calls left it; the other subject cannot read it."""
        if not hasattr(self, "model"):
            return
        recent = sorted(self.model.txns.values(), key=lambda t: t.state != OPEN)[:8]
        for t in recent:
            r = self.api.tc("GET", f"/v1/transactions/{t.txn_id}", t.owner)
            expect(r, {200}, f"{t.owner} reads {t.txn_id}")
            got = r.json()
            partitions = {f"{self.name}-partition-{p}" for p in t.partitions}
            subs = {(self.name, s) for s in t.subs}
            assert got["state"] == t.state, \
                f"{t.txn_id} is {got['state']}, its owner's calls left it {t.state}"
            assert set(got["partitions"]) == partitions, f"{t.txn_id}: partitions {got['partitions']}"
            assert {(s["topic"], s["subscription"]) for s in got["subscriptions"]} == subs, \
                f"{t.txn_id}: subscriptions {got['subscriptions']}"
            other = next(s for s in SUBJECTS if s != t.owner)
            r = self.api.tc("GET", f"/v1/transactions/{t.txn_id}", other)
            expect(r, {403}, f"{other} reads {t.txn_id}")


def test_the_rest_api_keeps_the_models_promises(suite: Suite) -> None:
    api = Api(suite)
    RestModel.api = api
    _steps.clear()
    try:
        run_state_machine_as_test(RestModel, settings=settings(
            max_examples=max(1, STEPS // STEPS_PER_RUN), stateful_step_count=STEPS_PER_RUN, deadline=None,
            database=None, suppress_health_check=list(HealthCheck), print_blob=True, phases=PHASES,
            derandomize=not RANDOM))
    finally:
        api.http.close()
    made = sum(_steps.values())
    print(f"model steps: {made} {dict(_steps)}")
    # A run that made few calls, or never one kind of them, checked little (the step count per run
    # is Hypothesis' choice; the weights make each kind likely in a few hundred steps).
    assert made >= STEPS // 2 and set(ACTIONS) <= set(_steps), f"{made} steps: {dict(_steps)}"

"""The REST model (tests/support/restmodel.py) flags what the issue 21 reproductions did, and
nothing the contract allows: the stateful e2e test is only as strong as these rules."""

from __future__ import annotations

from tests.support.restmodel import REFUSED_OR_IGNORED, Model, Sub, parse_id

A, B = "app-1", "app-2"


def model() -> Model:
    m = Model(2)
    m.subs["s"] = Sub("s")
    return m


def test_ids_parse_as_the_contract_writes_them() -> None:
    assert parse_id("3:4") == (3, 4, -1) and parse_id("3:4:0") == (3, 4, 0)
    assert [parse_id(i) for i in ("L: 1", "7:-1", "x", "1:2:3:4", "", "1:2:-1", " 1:2")] == [None] * 7


def test_a_cumulative_ack_past_the_end_may_not_swallow_what_is_written_later() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    assert m.ack_expect(A, "s", ["7:3"], None, cumulative=True) == REFUSED_OR_IGNORED
    m.acked("s", ["7:3"], None, True, 200)  # nothing was delivered: a clamp acks nothing
    m.produced("7:2", 0, "v2", None)
    m.produced("7:3", 0, "v3", None)
    assert [x.mid for x in m.required("s")] == ["7:1", "7:2", "7:3"]
    assert m.fetched("s", A, [("7:1", 0, "v1"), ("7:2", 0, "v2")]) == []
    assert [x.mid for x in m.required("s")] == ["7:3"]


def test_an_ignored_individual_ack_of_an_id_not_yet_written_leaves_its_message_owed() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    m.acked("s", ["7:4"], None, False, 200)
    m.produced("7:4", 0, "v4", None)
    assert {x.mid for x in m.required("s")} == {"7:1", "7:4"}


def test_a_committed_ack_ends_delivery_an_aborted_one_makes_it_owed_again() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    assert m.fetched("s", A, [("7:1", 0, "v1")]) == []
    for commit in (False, True):
        m.opened(f"0:{commit:d}", A)
        m.txns[f"0:{commit:d}"].subs.add(("s", None))
        assert m.ack_expect(A, "s", ["7:1"], f"0:{commit:d}", False) == {200}
        m.acked("s", ["7:1"], f"0:{commit:d}", False, 200)
        assert m.fetched("s", A, [("7:1", 0, "v1")]) != []  # held: not to be delivered
        m.subs["s"].out.pop("7:1")  # (undo the delivery the check recorded)
        assert m.ack_expect(A, "s", ["7:1"], None, False) == {409}  # held by an open transaction
        assert m.end_expect(B, f"0:{commit:d}", commit) == {403}
        m.ended(f"0:{commit:d}", commit)
        if not commit:
            assert [x.mid for x in m.required("s")] == ["7:1"]
            assert m.fetched("s", B, [("7:1", 0, "v1")]) == []  # delivered again: allowed
    assert m.required("s") == []
    assert "after an ack" in m.fetched("s", A, [("7:1", 0, "v1")])[0]


def test_nothing_open_or_aborted_nor_behind_an_open_transaction_is_delivered() -> None:
    m = model()
    m.opened("0:1", A)
    m.opened("0:2", A)
    m.produced("7:1", 0, "t1", "0:1")
    m.produced("7:2", 0, "t2", "0:2")
    m.produced("7:3", 0, "plain", None)
    assert m.required("s") == []  # all behind 0:1's message
    assert "OPEN" in m.fetched("s", A, [("7:1", 0, "t1")])[0]
    m.ended("0:2", commit=False)
    assert "ABORTED" in m.fetched("s", A, [("7:2", 0, "t2")])[0]
    assert "behind an open" in m.fetched("s", A, [("7:3", 0, "plain")])[0]
    m.ended("0:1", commit=True)
    m.subs["fresh"] = Sub("fresh")
    assert {x.mid for x in m.required("fresh")} == {"7:1", "7:3"}


def test_a_message_out_comes_again_only_once_let_go() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    assert m.fetched("s", A, [("7:1", 0, "v1")]) == []
    assert "again" in m.fetched("s", A, [("7:1", 0, "v1")])[0]
    m.consumer_closed("s", A)
    assert m.fetched("s", B, [("7:1", 0, "v1")]) == []
    assert m.fetched("s", B, [("9:9", 1, "nobody's")]) != []


def test_only_the_owner_of_an_open_registered_transaction_writes_or_acks_in_it() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    m.fetched("s", A, [("7:1", 0, "v1")])
    m.opened("0:1", A)
    assert m.produce_expect(A, "0:1", 0) == {409}  # not registered
    m.txns["0:1"].partitions.add(0)
    assert m.produce_expect(A, "0:1", 0) == {200}
    assert m.produce_expect(B, "0:1", 0) == {403}
    assert m.produce_expect(A, "0:424242", 0) == {404}
    assert m.ack_expect(A, "s", ["7:1"], "0:1", False) == {409}  # subscription not registered
    assert m.ack_expect(B, "s", ["7:1"], "0:1", False) == {403, 409}
    assert m.register_expect(B, "0:1") == {403}
    m.ended("0:1", commit=True)
    assert m.produce_expect(A, "0:1", 0) == {409}
    assert m.end_expect(A, "0:1", commit=True) == {200} and m.end_expect(A, "0:1", commit=False) == {409}
    assert m.ack_expect(A, "s", ["L: 1"], None, False) == {400}


def test_a_nack_lets_go_what_is_out_and_nothing_else() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    m.produced("7:2", 0, "v2", None)
    m.fetched("s", A, [("7:1", 0, "v1")])
    assert m.nack_expect("s", ["7:1"]) == {200}
    assert m.nack_expect("s", ["7:2"]) == {200, 400} and m.nack_expect("s", ["9:1"]) == {400, 404}
    m.nacked("s", ["7:1", "7:2"], 200)
    assert {x.mid for x in m.required("s")} == {"7:1", "7:2"}
    assert m.fetched("s", B, [("7:1", 0, "v1")]) == []  # again, once
    assert "again" in m.fetched("s", B, [("7:1", 0, "v1")])[0]


def test_a_cumulative_transactional_ack_holds_what_a_nack_let_go_before_it() -> None:
    # As the broker does (dispatch.units_through: out or queued for redelivery): CI found the model
    # owed a nacked message that a later cumulative ack in an open transaction covered.
    m = model()
    for i in (1, 2, 3):
        m.produced(f"7:{i}", 0, f"v{i}", None)
    assert m.fetched("s", A, [("7:1", 0, "v1"), ("7:2", 0, "v2"), ("7:3", 0, "v3")]) == []
    m.nacked("s", ["7:2"], 200)
    m.opened("0:1", A)
    m.txns["0:1"].subs.add(("s", None))
    m.acked("s", ["7:3"], "0:1", True, 200)
    assert m.required("s") == []
    assert "held by open transaction" in m.fetched("s", A, [("7:2", 0, "v2")])[0]
    m.subs["s"].out.pop("7:2")
    m.ended("0:1", commit=False)
    assert [x.mid for x in m.required("s")] == ["7:1", "7:2", "7:3"]


def test_a_delete_waits_for_open_transactions_and_connected_consumers() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    assert m.delete_expect("gone", force=True) == {404}
    assert m.fetched("s", A, [("7:1", 0, "v1")]) == []
    assert m.delete_expect("s", force=False) == {409}  # A is connected
    m.opened("0:1", B)
    m.txns["0:1"].subs.add(("s", None))
    m.acked("s", ["7:1"], "0:1", False, 200)
    assert m.delete_expect("s", force=True) == {409}  # force does not drop a transaction's acks
    m.ended("0:1", commit=True)
    assert m.delete_expect("s", force=True) == {200}
    m.consumer_closed("s", A)
    assert m.delete_expect("s", force=False) == {200}
    m.deleted("s")
    assert m.delete_expect("s", force=False) == {404}


def test_a_transaction_that_acked_nothing_on_a_deleted_subscription_still_ends() -> None:
    m = model()
    m.produced("7:1", 0, "v1", None)
    assert m.fetched("s", A, [("7:1", 0, "v1")]) == []
    m.acked("s", ["7:1"], None, False, 200)
    m.opened("0:1", A)
    m.txns["0:1"].subs.add(("s", None))
    m.acked("s", ["7:1"], "0:1", False, 200)  # of an id acked already: the model holds nothing
    m.consumer_closed("s", A)
    assert m.delete_expect("s", force=True) == {200, 409}  # the broker may hold it all the same
    m.deleted("s")
    m.ended("0:1", commit=True)
    assert m.txns["0:1"].state == "COMMITTED"

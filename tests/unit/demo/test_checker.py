"""The checker on hand-made histories, one per anomaly."""

from __future__ import annotations

from streamtx.demo.checker import Observed, Written, check
from streamtx.demo.partitioner import RangePartitioner

# Two users on source partition 0 (seqs interleaved), one on partition 1.
WRITTEN = [
    Written(0, 0, 10), Written(0, 1, 20), Written(0, 2, 10), Written(0, 3, 20),
    Written(1, 0, 31), Written(1, 1, 31),
]


def obs(p: int, s: int, user: int, txn: str = "1:1", dest: int = 0, mid: str | None = None) -> Observed:
    return Observed(dest, mid or f"9:{p * 100 + s}", p, s, user, txn)


def clean() -> list[Observed]:
    return [obs(0, 0, 10), obs(1, 0, 31), obs(0, 1, 20), obs(0, 2, 10, "1:2"), obs(1, 1, 31, "1:2"),
            obs(0, 3, 20, "1:2")]


def test_clean_history_is_ok() -> None:
    report = check(WRITTEN, clean(), aborted={"1:9"})
    assert report.ok
    assert (report.written, report.observed) == (6, 6)
    assert "OK" in report.render()


def test_lost_write() -> None:
    history = [o for o in clean() if (o.src_partition, o.seq) != (0, 2)]
    report = check(WRITTEN, history, aborted=())
    assert (report.lost.count, report.duplicate.count, report.nonmonotonic.count) == (1, 0, 0)
    assert "user 10 partition 0 seq 2" in report.lost.examples[0]
    assert not report.ok


def test_duplicate_counts_each_record_once_and_is_not_also_nonmonotonic() -> None:
    history = [*clean(), obs(0, 1, 20, "1:3", mid="9:999"), obs(0, 1, 20, "1:4", mid="9:1000")]
    report = check(WRITTEN, history, aborted=())
    assert report.duplicate.count == 1
    assert "appears 3 times" in report.duplicate.examples[0]
    assert report.nonmonotonic.count == 0
    assert report.lost.count == 0


def test_aborted_read_g1a() -> None:
    history = clean()
    history[4] = obs(1, 1, 31, "7:7")
    report = check(WRITTEN, history, aborted={"7:7", "8:8"})
    assert report.aborted_read.count == 1
    assert "aborted txn 7:7" in report.aborted_read.examples[0]
    assert (report.lost.count, report.duplicate.count) == (0, 0)


def test_nonmonotonic_per_user() -> None:
    # user 10's seq 2 comes before its seq 0: one inversion; user 20 untouched.
    history = [obs(0, 2, 10), obs(1, 0, 31), obs(0, 1, 20), obs(0, 0, 10), obs(1, 1, 31), obs(0, 3, 20)]
    report = check(WRITTEN, history, aborted=())
    assert report.nonmonotonic.count == 1
    assert "user 10: seq 0 of partition 0 after seq 2" in report.nonmonotonic.examples[0]
    assert report.lost.count == report.duplicate.count == 0


def test_interleaving_other_users_is_not_nonmonotonic() -> None:
    # users 10 and 20 share source partition 0; their records may interleave freely.
    history = [obs(0, 1, 20), obs(0, 0, 10), obs(0, 3, 20), obs(0, 2, 10), obs(1, 0, 31), obs(1, 1, 31)]
    assert check(WRITTEN, history, aborted=()).ok


def test_misrouted_and_indeterminate() -> None:
    ranges = RangePartitioner(40, 2)  # users < 20 -> 0, >= 20 -> 1
    history = [o if o.user_id < 20 else Observed(1, o.message_id, o.src_partition, o.seq, o.user_id,
                                                 o.txn_id) for o in clean()]
    history[0] = Observed(1, "9:0", 0, 0, 10, "1:1")  # user 10 in the wrong range
    history.append(obs(1, 2, 31, dest=1))  # never acknowledged by the generator
    report = check(WRITTEN, history, aborted=(), expected_partition=ranges.partition_of)
    assert report.misrouted.count == 1
    assert report.indeterminate.count == 1
    assert not report.ok

"""A file store keeps at most ``max_open_ledgers`` ledgers' files open; the others reopen on use
(issue 21 item 8), and an open that fails for want of descriptors makes the store unhealthy
until one succeeds again.

Before: every open ledger held its LOCK file and its segments for good (a broker's
cursor ledgers: two descriptors per subscription and partition), and running out of
descriptors was invisible to ``/readyz``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from streamtx.ledger import open_ledger_factory
from streamtx.ledger.file import FileLedgerFactory


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_only_the_most_recently_used_ledgers_hold_their_files(tmp_path: Path) -> None:
    ledgers = open_ledger_factory(f"file://{tmp_path}?max_open_ledgers=3&segment_bytes=200")
    assert isinstance(ledgers, FileLedgerFactory)
    before = open_fds()
    opened = [await ledgers.open(f"l{i}") for i in range(30)]
    for i, led in enumerate(opened):
        for k in range(5):  # several segments each (200 bytes)
            await led.append(b"%d-%d-" % (i, k) + b"x" * 60)
    assert len(ledgers.files) <= 3
    # 3 ledgers with a LOCK and a few segments each, however many are open (was 30 x 6).
    assert open_fds() - before <= 3 * 7
    for i, led in enumerate(opened):  # every one reads and appends again: reopened on use
        got = [e.data.split(b"-")[:2] for e in await led.read(None, 10)]
        assert got == [[b"%d" % i, b"%d" % k] for k in range(5)]
        pos = await led.append(b"after")
        assert [e.data for e in await led.read(pos, 1)] == [b"after"]
    assert open_fds() - before <= 3 * 7 and ledgers.files.released >= 27
    await ledgers.close()
    assert open_fds() <= before


async def test_a_ledger_trimmed_and_appended_to_elsewhere_while_released_reads_on(tmp_path: Path) -> None:
    ours = FileLedgerFactory(str(tmp_path), segment_bytes=100, max_open_ledgers=1)
    theirs = FileLedgerFactory(str(tmp_path), segment_bytes=100)
    led = await ours.open("t", writer=False)
    other = await theirs.open("t")
    positions = [await other.append(b"m%02d" % i + b"y" * 40) for i in range(10)]
    await led.refresh()
    await ours.open("u")  # ``t`` releases its files
    assert ours.files.released == 1
    await other.trim(positions[6])  # whole segments below it are deleted
    last = await other.append(b"last")
    await led.refresh()
    got = [e.data[:3] for e in await led.read(positions[6], 10)]
    assert got == [b"m06", b"m07", b"m08", b"m09", b"las"]
    assert led.last_position() == last
    await ours.close()
    await theirs.close()


async def test_out_of_descriptors_is_unhealthy_until_a_file_opens_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledgers = FileLedgerFactory(str(tmp_path))
    assert await ledgers.health() is None
    real_open = os.open
    out = True

    def emfile(path: str, flags: int, mode: int = 0o777, **kw: object) -> int:
        if out:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", emfile)
    with pytest.raises(Exception, match="Too many open files"):
        await ledgers.open("a")
    reason = await ledgers.health()
    assert reason is not None and "file descriptors" in reason
    assert await ledgers.health() is not None  # still: the probe opens nothing either
    out = False
    assert await ledgers.health() is None  # the probe opened a file: recovered
    led = await ledgers.open("a")
    pos = await led.append(b"x")
    assert [e.data for e in await led.read(pos, 1)] == [b"x"]
    await ledgers.close()

"""The file backend's I/O runs on one pool per store: threads are bounded, each ledger's calls serial."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamtx.ledger.file import FileLedgerFactory
from streamtx.ledger.ioexec import SerialExecutor


async def test_many_file_ledgers_share_a_bounded_pool(tmp_path: Path) -> None:
    before = threading.active_count()
    factory = FileLedgerFactory(str(tmp_path), io_threads=3)
    try:
        ledgers = [await factory.open(f"l{i}") for i in range(40)]
        positions = await asyncio.gather(*(led.append(b"x%d" % i) for i, led in enumerate(ledgers)))
        assert len(set(positions)) == 40
        assert (await ledgers[7].read(None, 10))[0].data == b"x7"
        during = threading.active_count()
    finally:
        await factory.close()
    print(f"40 file ledgers: {during - before} I/O threads (was one per ledger: 40)")
    assert during - before <= 3


async def test_serial_executor_runs_one_call_at_a_time_in_order() -> None:
    pool = ThreadPoolExecutor(max_workers=8)
    serial = SerialExecutor(pool)
    running, seen, overlap = 0, [], []
    guard = threading.Lock()

    def job(i: int) -> int:
        nonlocal running
        with guard:
            running += 1
            overlap.append(running)
        time.sleep(0.001)
        seen.append(i)
        with guard:
            running -= 1
        return i

    loop = asyncio.get_running_loop()
    futures = [loop.run_in_executor(serial, job, i) for i in range(50)]
    futures[10].cancel()  # a caller going away does not let the next call start early
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert max(overlap) == 1
    assert seen == sorted(seen) and len(seen) >= 49
    assert [r for r in results if not isinstance(r, BaseException)] == [i for i in range(50) if i != 10]
    pool.shutdown()

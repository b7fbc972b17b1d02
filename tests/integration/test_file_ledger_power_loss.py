"""The file backend after a power loss: only synced bytes survive, and every ack was synced.

A kill -9 keeps the page cache, so it cannot tell an fsync from none; here the
appender process records what each ``fsync``/``fdatasync`` made durable (a file's
bytes, a directory's names) and then rewrites its files to exactly that and drops
every name no directory fsync covered (``tests/support/power_loss.py``): a new
segment whose directory was not fsynced is lost whole, acknowledged entries with it
(issue 38 mutation 3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from streamtx.ledger import open_ledger_factory
from tests.support.procs import python_env

REPO = Path(__file__).resolve().parents[2]


def lose_power_after(url: str, name: str, count: int) -> dict[str, list[list[object]] | int]:
    env = python_env()
    out = subprocess.run([sys.executable, "-m", "tests.support.power_loss", url, name, str(count)],
                         cwd=REPO, env=env, capture_output=True, timeout=120, check=True)
    result: dict[str, list[list[object]] | int] = json.loads(out.stdout.decode().splitlines()[-1])
    return result


async def test_acknowledged_appends_survive_a_power_loss(tmp_path: Path) -> None:
    # Small segments, so appends roll over to new files too.
    url = f"file://{tmp_path / 'ledgers'}?segment_bytes=8192"
    result = lose_power_after(url, "power/loss", 200)
    acked = result["acked"]
    assert isinstance(acked, list) and len(acked) == 200
    ledgers = open_ledger_factory(url)
    try:
        ledger = await ledgers.open("power/loss")
        entries = {e.position.entry_id: e.data for e in await ledger.read(None, 10_000)}
        lost = [(eid, data) for eid, data in acked if entries.get(int(eid)) != bytes.fromhex(str(data))]
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged entries lost, first at {lost[0][0]}"
        after = await ledger.append(b"after the power loss")
        assert after.entry_id > max(int(eid) for eid, _ in acked)
    finally:
        await ledgers.close()
    # Concurrent appends share syncs (group commit): fewer syncs than appends.
    syncs = result["syncs"]
    assert isinstance(syncs, int) and 0 < syncs < 200

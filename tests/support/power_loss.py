"""Append to a ledger, then lose power: every byte not made durable by a sync is gone.

Run as ``python -m tests.support.power_loss URL NAME COUNT`` (with the repo root
on PYTHONPATH: tests.support.procs.python_env). Before anything imports the ledger code, this
wraps ``os.fsync`` and ``os.fdatasync``: each sync of a regular file records the
file's bytes at that moment as durable, and each fsync of a directory records the
names it holds then as durable directory entries. The script appends COUNT entries
(concurrently, so appends share syncs), then plays a power loss: every file
under the ledger root is rewritten to its last durable bytes (empty if never
synced), and every name a directory under the root got since its last fsync is gone
(with what it named: a file or a whole folder), as a machine that lost its page
cache would find it. (Names removed since are not brought back: the ledger only
ever removes trimmed segments and a renamed ``TRIM.tmp``.) SIGKILL keeps the
page cache, so a kill -9 test cannot see a missing sync; this can.

It prints one JSON line: ``{"acked": [[entry_id, hex payload], ...], "syncs": N}``
(each append acknowledged before the power loss), and exits without closing
anything.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable
from typing import Any

_durable: dict[str, bytes] = {}
_listed: dict[str, set[str]] = {}  # directory -> the names its last fsync made durable
_syncs = 0


def _recording(sync: Callable[[int], None]) -> Callable[[int], None]:
    def wrapper(fd: int) -> None:
        global _syncs
        sync(fd)
        _syncs += 1
        mode = os.fstat(fd).st_mode
        path = os.readlink(f"/proc/self/fd/{fd}")
        if stat.S_ISREG(mode):
            size = os.fstat(fd).st_size
            _durable[path] = os.pread(fd, size, 0) if size else b""
        elif stat.S_ISDIR(mode):
            _listed[path] = set(os.listdir(path))

    return wrapper


os.fsync = _recording(os.fsync)  # type: ignore[assignment]
if hasattr(os, "fdatasync"):
    os.fdatasync = _recording(os.fdatasync)  # type: ignore[assignment]


def power_loss(root: str) -> None:
    """Every file under ``root`` back to its last synced bytes (nothing, if never synced), and
    every directory entry under it that no fsync of its directory made durable gone."""
    for folder, folders, files in os.walk(root):
        durable = _listed.get(os.path.realpath(folder), set())
        for name in [n for n in folders + files if n not in durable]:
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        folders[:] = [n for n in folders if n in durable]  # os.walk goes into what is left
        for name in (n for n in files if n in durable):
            path = os.path.join(folder, name)
            with open(path, "wb") as f:
                f.write(_durable.get(os.path.realpath(path), b""))


async def run(url: str, name: str, count: int) -> dict[str, Any]:
    import asyncio

    from streamtx.ledger import open_ledger_factory

    ledgers = open_ledger_factory(url)
    ledger = await ledgers.open(name)
    payloads = [f"entry {i} ".encode() * (1 + i % 50) for i in range(count)]
    acked: list[list[Any]] = []

    async def append(data: bytes) -> None:
        pos = await ledger.append(data)
        acked.append([pos.entry_id, data.hex()])

    for start in range(0, count, 16):
        await asyncio.gather(*(append(p) for p in payloads[start:start + 16]))
    return {"acked": acked, "syncs": _syncs}


def main() -> None:
    import asyncio
    import json
    from urllib.parse import urlsplit

    url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = asyncio.run(run(url, name, count))
    parts = urlsplit(url)
    power_loss(parts.netloc + parts.path)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

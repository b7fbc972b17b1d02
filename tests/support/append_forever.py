"""Append to a file ledger from many concurrent tasks, printing each acknowledged entry.

Run as ``python -m tests.support.append_forever ROOT NAME --run R`` (with
the repo root on PYTHONPATH: tests.support.procs.python_env). It prints ``READY`` once the ledger
is open, then one line ``ACK <offset> <key> <sha256 prefix>`` per append, only
after the append returned, flushed at once, so a test can kill -9 it at any
moment and know what was acknowledged. ``payload_for(key)`` rebuilds an
entry's exact bytes from its key. ``--raw`` appends through the raw log (no
fencing), so several processes can write one ledger at once.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys

from streamtx.ledger.file import FileLedgerFactory, FileRawLog


def payload_for(key: str) -> bytes:
    """The payload for ``key``: the key, ``|``, then filler derived from it (16 B .. 48 KiB)."""
    digest = hashlib.sha256(key.encode()).digest()
    n = int.from_bytes(digest[:4], "big")
    size = 16 + n % 48_000 if n % 16 == 0 else 16 + n % 400
    return key.encode() + b"|" + (digest * (size // 32 + 1))[:size]


def key_of(payload: bytes) -> str:
    return payload.split(b"|", 1)[0].decode()


def ack_line(offset: int, key: str, payload: bytes) -> str:
    return f"ACK {offset} {key} {hashlib.sha256(payload).hexdigest()[:16]}\n"


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("name")
    p.add_argument("--run", default="0")
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--count", type=int, default=0, help="appends per task; 0 = forever")
    p.add_argument("--segment-bytes", type=int, default=256 << 10)
    p.add_argument("--raw", action="store_true")
    args = p.parse_args()
    out = sys.stdout

    if args.raw:
        from streamtx.ledger.segment import ledger_dir_name

        raw = await FileRawLog.open(
            f"{args.root}/{ledger_dir_name(args.name)}", segment_bytes=args.segment_bytes
        )

        async def append(data: bytes) -> int:
            (offset,) = await raw.append_batch([data])
            return offset

        close = raw.close
    else:
        ledgers = FileLedgerFactory(args.root, segment_bytes=args.segment_bytes)
        ledger = await ledgers.open(args.name)

        async def append(data: bytes) -> int:
            return (await ledger.append(data)).entry_id

        close = ledgers.close

    out.write("READY\n")
    out.flush()

    async def task(t: int) -> None:
        i = 0
        while not args.count or i < args.count:
            key = f"{args.run}.{t}.{i}"
            payload = payload_for(key)
            offset = await append(payload)
            out.write(ack_line(offset, key, payload))
            out.flush()
            i += 1

    await asyncio.gather(*(task(t) for t in range(args.tasks)))
    await close()
    out.write("DONE\n")
    out.flush()


if __name__ == "__main__":
    asyncio.run(main())

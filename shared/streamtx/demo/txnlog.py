"""A demo worker's transaction log, and driving a transaction to its end with the coordinator.

Every transaction is logged as opened before it is used and again at each step
(wrote, committing, its outcome), so a restarted worker first aborts the orphans
of its previous life; the checker reads the same log. Resolving retries while
the coordinator is away (commit is idempotent) and gives up with
:class:`Uncertain` after ``resolve_give_up_s``: the restart resolves it. A mixin
of :class:`streamtx.demo.worker.Worker`, apart from the transaction loop that
decides when to commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from pathlib import Path
from typing import Any, TextIO

from streamtx.demo.layout import read_jsonl
from streamtx.demo.rest import Rest, retry_max_backoff_s, retry_retriable
from streamtx.errors import ConflictError, NotFoundError, NotServedError, StreamtxError

resolve_give_up_s = 90.0  # a coordinator down longer than this: exit, the restart resolves it


class Uncertain(Exception):
    """The outcome of a transaction could not be learned."""


class TxnLog:
    """The worker's log of its transactions, and their resolution (state set by the worker)."""

    rest: Rest
    log_path: Path
    log: TextIO | None
    txn_timeout_ms: int

    def _log(self, txn: str, outcome: str, **kw: Any) -> None:
        assert self.log is not None
        self.log.write(json.dumps({"txn": txn, "o": outcome, "t": time.time(), **kw},
                                  separators=(",", ":")) + "\n")
        self.log.flush()

    async def _resolve(self, txn: str, *, commit: bool) -> bool:
        """Drive ``txn`` to an end; True if it committed. Retries while the TC is away."""
        deadline = time.monotonic() + resolve_give_up_s
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                if commit:
                    await self.rest.commit(txn)
                    return True
                await self.rest.abort(txn)
                return False
            except NotServedError:
                pass  # asked a coordinator that does not hold its id: no verdict; ask again
            except NotFoundError:
                return False  # the TC never made it durable: nothing of it can commit
            except ConflictError:
                if commit:
                    return False  # aborted, aborting or timed out
                # abort refused: it is committing or committed; wait for the end.
                with contextlib.suppress(StreamtxError):
                    state = await self.rest.txn_state(txn)
                    if state == "COMMITTED":
                        return True
                    if state in ("ABORTED", "TIMEOUT"):
                        return False
            except StreamtxError:
                pass
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, retry_max_backoff_s)
        raise Uncertain(txn)

    async def resolve_orphans(self) -> None:
        last: dict[str, str] = {}
        for line in read_jsonl(self.log_path):
            last[line["txn"]] = line["o"]
        for txn, outcome in last.items():
            if outcome in ("open", "wrote", "committing"):
                committed = await self._resolve(txn, commit=False)
                self._log(txn, "committed" if committed else "aborted", n=-1, why="orphan of a previous life")

    async def begin(self) -> str:
        txn = str(await retry_retriable(lambda: self.rest.begin(self.txn_timeout_ms),
                                        give_up_s=resolve_give_up_s))
        self._log(txn, "open")
        return txn

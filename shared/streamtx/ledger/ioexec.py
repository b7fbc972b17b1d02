"""One I/O thread pool for every file ledger of a store, each ledger's calls still one at a time.

A file ledger handle keeps an in-memory index that exactly one thread may
mutate, and its appends must reach the files in call order. It used to get
both from a thread of its own: a service with N ledgers ran N threads (a
pending-ack store per subscription holds two ledgers, so 300 subscriptions were
600 threads). :class:`SerialExecutor` gives each handle the same guarantees on
a pool the whole store shares: the handle's calls run in submission order, never
two at once, and the pool bounds the threads however many ledgers are open.

Serialisation is done at the thread level, not with an asyncio lock: a caller
that is cancelled while its call runs does not let the next call start early.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class SerialExecutor(Executor):
    """Runs its calls one at a time, in order, on a shared ``pool``."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._running = False
        self._shutdown = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._queue.append((future, lambda: fn(*args, **kwargs)))
            if self._running:
                return future
            self._running = True
        try:
            self._pool.submit(self._drain)
        except RuntimeError:  # the shared pool was shut down (its store closed)
            with self._lock:
                self._queue.clear()
                self._running = False
            raise
        return future

    def _drain(self) -> None:
        """Run the next queued call (on a pool thread), then queue up behind the other ledgers."""
        with self._lock:
            future, call = self._queue.popleft()
        if future.set_running_or_notify_cancel():
            try:
                result = call()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
        with self._lock:
            if not self._queue:
                self._running = False
                return
        # One call per turn: a busy ledger cannot hold a pool thread while others wait.
        self._pool.submit(self._drain)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; the ones queued still run (the shared pool stays up)."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()

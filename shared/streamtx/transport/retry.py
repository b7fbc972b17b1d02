"""The one retry policy: how many tries, how long between them, until when.

Every caller that repeats a call - the SDK, each service's client of another
service, the demo - describes what it wants with a :class:`RetryPolicy` and
lets :meth:`RetryPolicy.run` do it, so backoff, jitter and the rule for what
is worth retrying live here once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from streamtx.errors import StreamtxError

T = TypeVar("T")

#: ``(try number from 1, the error)`` after a failed try that will be retried.
OnRetry = Callable[[int, BaseException], None]


def is_retriable(exc: BaseException) -> bool:
    """A streamtx error that says retrying can help (503s, transport errors, 429, 5xx replies)."""
    return isinstance(exc, StreamtxError) and exc.retriable


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Tries, backoff and deadline of a repeated call.

    The delay before try ``n + 1`` is ``backoff_s * 2**(n - 1)``, capped at
    ``max_backoff_s``, times a jitter in ``[0.5, 1.5)``. It stops after
    ``attempts`` tries (``None``: no limit), or when the next try would start
    after ``deadline_s`` seconds from the first (``None``: no deadline), and
    raises the last error. Only retriable errors are retried unless
    ``any_error``: a call that must land (a coordinator's end) retries even a
    garbled answer.
    """

    attempts: int | None = 4
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    deadline_s: float | None = None
    any_error: bool = False

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("attempts must be at least 1 (or None for no limit)")
        if self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ValueError("need 0 <= backoff_s <= max_backoff_s")

    def with_attempts(self, attempts: int | None) -> RetryPolicy:
        """The same policy with another number of tries."""
        return RetryPolicy(attempts, self.backoff_s, self.max_backoff_s, self.deadline_s, self.any_error)

    def delays(self) -> list[float]:
        """The un-jittered delays between tries (for a finite policy; docs and tests)."""
        if self.attempts is None:
            raise ValueError("an unlimited policy has no finite list of delays")
        return [min(self.backoff_s * 2**i, self.max_backoff_s) for i in range(self.attempts - 1)]

    async def run(self, call: Callable[[], Awaitable[T]], *, on_retry: OnRetry | None = None) -> T:
        """``await call()`` until it succeeds or the policy gives up (then raise its last error)."""
        deadline = None if self.deadline_s is None else time.monotonic() + self.deadline_s
        delay = self.backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except Exception as exc:
                if not (self.any_error or is_retriable(exc)):
                    raise
                if self.attempts is not None and attempt >= self.attempts:
                    raise
                sleep = delay * (0.5 + random.random())
                if deadline is not None and time.monotonic() + sleep > deadline:
                    raise
                if on_retry is not None:
                    on_retry(attempt, exc)
            await asyncio.sleep(sleep)
            delay = min(delay * 2, self.max_backoff_s)


#: One try, no retry: a call the caller repeats itself, or one that must not be repeated.
ONCE = RetryPolicy(attempts=1)

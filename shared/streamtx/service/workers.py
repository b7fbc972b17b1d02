"""Several worker processes on one port (``STREAMTX_WORKERS=N``), the usual way to use
a multi-core node with an asyncio service.

``N = 1`` (the default) is the plain in-process path: :func:`serve_app` builds the
app and serves it here. ``N > 1``: this process becomes a supervisor that

- starts N workers, forked from this process before it has an event loop or a
  thread (so they start in milliseconds with the modules already imported,
  instead of N concurrent imports: 13 s on a loaded 2-core machine; ``spawn``
  if a thread exists); each builds its own app; worker ``i`` gets
  ``worker_index=i`` and the member
  name ``<member>-w<i>`` (``.<generation>`` added when it is restarted), so each is
  a member of the ownership of its own;
- has every worker bind the same ``host:port`` itself with ``SO_REUSEPORT``: the
  kernel spreads new connections over the listening workers, and a worker that
  dies stops receiving them at once;
- forwards SIGTERM/SIGINT to the workers (each in a process group of its own, so
  a terminal's Ctrl-C reaches them once, through here) and waits for them, then
  SIGKILLs one still running well past its own shutdown bound;
- restarts a worker that died while it was not asked to stop (after a second:
  a crash loop does not spin). The dead worker's logs move to its siblings when
  its leases run out, as with any dead replica; the restarted one joins as a new
  member.

``/metrics`` answers for every worker of the port, whichever answers the scrape
(:mod:`streamtx.service.workermetrics`; the service's ``__main__`` prepares it).

A worker dies with its supervisor (``PR_SET_PDEATHSIG``): a supervisor killed
with SIGKILL leaves no orphan holding the port.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, TypeVar

from fastapi import FastAPI

from streamtx.service import workermetrics
from streamtx.service.serve import GRACEFUL_S, configure_logging, serve
from streamtx.service.settings import ServiceSettings

__all__ = ["member_of", "reuseport_socket", "serve_app"]

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ServiceSettings)
_restart_delay_s = 1.0
_kill_after_s = 10.0  # past a worker's own shutdown bound and its watchdog's margin
_PR_SET_PDEATHSIG = 1


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` that other processes may bind too (not listening yet:
    uvicorn calls ``listen`` once the app has started, so a worker gets connections only then)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    sock.set_inheritable(True)
    return sock


def member_of(base: str, index: int, generation: int = 0) -> str:
    """Worker ``index``'s name in the ownership membership."""
    return f"{base}-w{index}" + (f".{generation}" if generation else "")


def serve_app(factory: Callable[[S], FastAPI], settings: S, *, base_member: str = "") -> None:
    """Serve the app ``factory(settings)`` makes, in this process or in ``settings.workers`` workers.

    ``factory`` must be a module-level function (the workers import it by name).
    ``base_member``: the name the workers' member names start with (default hostname-pid).
    """
    if settings.workers == 1:
        serve(factory(settings), settings.host, settings.port, loop=settings.server_loop,
              http=settings.server_http)
        return
    _supervise(factory, settings, base_member or f"{socket.gethostname()}-{os.getpid()}")


def _worker(factory: Callable[[S], FastAPI], settings: S, supervisor: int) -> None:
    # Forked: drop the supervisor's handlers (they would signal the siblings); uvicorn
    # installs its own once it serves.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.suppress(OSError):  # Ctrl-C reaches workers through the supervisor only
        os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # it died before prctl took effect
        return
    sock = reuseport_socket(settings.host, settings.port)
    serve(factory(settings), settings.host, settings.port, sock=sock, loop=settings.server_loop,
          http=settings.server_http)


class _Supervisor:
    def __init__(self, factory: Callable[[S], FastAPI], settings: S, base_member: str) -> None:
        self._factory = factory
        self._settings = settings
        self._base = base_member
        self._ctx: Any = multiprocessing.get_context("fork" if threading.active_count() == 1 else "spawn")
        self.workers: dict[int, BaseProcess] = {}
        self._generation = dict.fromkeys(range(settings.workers), 0)
        self.stopping = False
        self.signal = 0

    def start(self, index: int) -> None:
        member = member_of(self._base, index, self._generation[index])
        settings = self._settings.model_copy(update={"worker_index": index, "member": member})
        proc = self._ctx.Process(target=_worker, args=(self._factory, settings, os.getpid()), name=member)
        proc.start()
        self.workers[index] = proc
        log.info("worker %d (%s) started, pid %s", index, member, proc.pid)

    def forward(self, sig: int, _: FrameType | None) -> None:
        self.stopping, self.signal = True, sig
        for proc in self.workers.values():
            if proc.pid is not None and proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)

    def run(self) -> int:
        for index in range(self._settings.workers):
            self.start(index)
        while not self.stopping:
            wait([p.sentinel for p in self.workers.values()], timeout=0.5)
            for index, proc in list(self.workers.items()):
                if proc.exitcode is not None and proc.pid is not None:
                    workermetrics.process_died(proc.pid)
                if proc.exitcode is not None and not self.stopping:
                    log.error("worker %d (pid %s) exited with %s; restarting it", index, proc.pid,
                              proc.exitcode)
                    time.sleep(_restart_delay_s)
                    self._generation[index] += 1
                    if not self.stopping:
                        self.start(index)
        # Each worker's own watchdog ends it if its shutdown hangs (service/shutdown.py); this
        # is for one that cannot even do that.
        deadline = time.monotonic() + GRACEFUL_S + self._settings.shutdown_timeout_s + _kill_after_s
        for proc in self.workers.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                log.error("worker %s (pid %s) still running after its shutdown's time; killing it",
                          proc.name, proc.pid)
                proc.kill()
                proc.join()
        # uvicorn re-raises the stop signal once it has shut down cleanly: dying of the
        # signal we forwarded is a clean exit.
        codes = [p.exitcode or 0 for p in self.workers.values()]
        return max((abs(c) for c in codes if c != -self.signal), default=0)


def _supervise(factory: Callable[[S], FastAPI], settings: S, base_member: str) -> None:
    configure_logging()
    # Fail here, once, with a clear message, rather than in N workers.
    reuseport_socket(settings.host, settings.port).close()
    sup = _Supervisor(factory, settings, base_member)
    signal.signal(signal.SIGTERM, sup.forward)
    signal.signal(signal.SIGINT, sup.forward)
    log.info("supervising %d workers on %s:%d", settings.workers, settings.host, settings.port)
    code = sup.run()
    workermetrics.cleanup()
    if code:
        sys.exit(code if code < 128 else 1)

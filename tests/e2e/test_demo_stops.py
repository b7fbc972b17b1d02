"""`streamtx demo reshard` stops cleanly and says when it checked nothing (issue 22 item 12).

Run as a user runs it (a subprocess; the real services on file ledgers in a
temporary run directory, ``TMPDIR`` pointed at the test's folder): SIGTERM
left its broker, pending-ack store and coordinator running (they run in
sessions of their own, so nothing else stops them); Ctrl-C printed a
KeyboardInterrupt traceback and left ``/tmp/streamtx-demo-*``; ``--rate 0``
printed ``checker: OK, exactly once`` over 0 records and exited 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procs import python_env

pytestmark = pytest.mark.timeout(300)


def _start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    tmp.mkdir(exist_ok=True)
    env = {**python_env(), "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "streamtx.cli", "demo", "reshard", "--workers", "1", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _descendants(pid: int) -> set[int]:
    """Every process whose parent is ``pid`` (the demo's services, workers and generator)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(("sig", "status", "how"), [(signal.SIGTERM, 143, "SIGTERM"),
                                                     (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_stops_everything_the_demo_started(tmp_path: Path, sig: signal.Signals, status: int,
                                                    how: str) -> None:
    tmp = tmp_path / "tmp"
    demo = _start(tmp, "--duration", "120", "--rate", "50")
    assert demo.stdout is not None
    for line in demo.stdout:  # the services are up and the workers own their partitions
        if line.startswith("demo: run dir "):
            break
    else:
        pytest.fail(f"the demo ended before it ran: {demo.communicate()}")
    deadline = time.monotonic() + 30
    # broker, pending-ack store, coordinator, a worker, then the generator
    while len(children := _descendants(demo.pid)) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(children) >= 5, children
    try:
        demo.send_signal(sig)
        out, err = demo.communicate(timeout=120)
        assert demo.returncode == status, (demo.returncode, out, err[-3000:])
        assert "Traceback" not in err, err[-3000:]
        assert f"demo: stopped by {how}" in err
        deadline = time.monotonic() + 10
        while (left := [p for p in children if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"still running after the demo stopped: {left}"
        assert list(tmp.iterdir()) == []  # no /tmp/streamtx-demo-* left
    finally:  # a failed run leaves nothing behind either
        for pid in [demo.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        demo.wait()


def test_a_run_that_wrote_nothing_says_so_and_fails(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    demo = _start(tmp, "--duration", "1", "--rate", "0", "--quiet")
    out, err = demo.communicate(timeout=240)
    assert demo.returncode == 1, (out, err[-3000:])
    assert "checker: NOTHING CHECKED" in out and "checker: OK" not in out, out
    assert list(tmp.iterdir()) == []

"""The local launchers' children (make run, make run-geo): watched and stopped together."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from streamtx.launch.children import Children

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_child_that_exits_stops_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    children = Children("t")
    sleepers = [children.start(f"s{i}", SLEEP, {}) for i in range(2)]
    children.start("quitter", [sys.executable, "-c", "raise SystemExit(3)"], {})
    with pytest.raises(SystemExit) as done:
        children.watch(poll_s=0.05)
    assert done.value.code == 0
    assert all(p.poll() is not None for p in sleepers)
    assert capsys.readouterr().out.splitlines() == ["t: quitter exited with 3; stopping", "t: stopped"]


def test_a_child_deaf_to_sigterm_is_killed_after_the_grace(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    children = Children("t", grace_s=0.3)
    ready = tmp_path / "deaf"
    deaf = children.start("deaf", [sys.executable, "-c", "import pathlib, signal, sys, time\n"
                                   "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                   "pathlib.Path(sys.argv[1]).touch()\ntime.sleep(60)", str(ready)], {})
    deadline = time.monotonic() + 20
    while not ready.exists():  # its handler is set once the file is there
        assert time.monotonic() < deadline and deaf.poll() is None
        time.sleep(0.05)
    with pytest.raises(SystemExit):
        children.fail("giving up")
    assert deaf.returncode == -9
    assert capsys.readouterr().out.splitlines() == [
        "t: giving up", "t: deaf still running 0.3 s after SIGTERM; killing it", "t: stopped"]

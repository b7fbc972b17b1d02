"""The local launchers' children (make run, make run-geo): watched and stopped together."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamtx.launch.children import Children
from tests.support.procs import free_port, python_env

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_child_that_exits_stops_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    children = Children("t")
    sleepers = [children.start(f"s{i}", SLEEP, {}) for i in range(2)]
    children.start("quitter", [sys.executable, "-c", "raise SystemExit(3)"], {})
    with pytest.raises(SystemExit) as done:
        children.watch(poll_s=0.05)
    assert done.value.code == 1  # a service that died is a failure to a script (issue 22 item 11)
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
    with pytest.raises(SystemExit) as done:
        children.fail("giving up")
    assert done.value.code == 1
    assert deaf.returncode == -9
    assert capsys.readouterr().out.splitlines() == [
        "t: giving up", "t: deaf still running 0.3 s after SIGTERM; killing it", "t: stopped"]


def test_the_suite_exits_non_zero_when_a_service_fails_to_start(tmp_path: Path) -> None:
    # A ledger URL no service can open: the first one (the broker) exits before it is ready.
    run = subprocess.run([sys.executable, "-m", "streamtx.launch.suite", "--data-dir", str(tmp_path),
                          "--ledger-url", "bogus://nowhere", "--base-port", str(free_port())],
                         capture_output=True, text=True, timeout=120, env=python_env())
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert "broker: " in run.stdout and "before" in run.stdout and "stopped" in run.stdout, run.stdout


def test_a_signal_stops_the_children_and_exits_0() -> None:
    children = Children("t")
    sleeper = children.start("s", SLEEP, {})
    with pytest.raises(SystemExit) as done:
        children._signalled()
    assert done.value.code == 0 and sleeper.poll() is not None

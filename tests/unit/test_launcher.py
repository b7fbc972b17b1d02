"""The local launchers' children (make run, make run-geo): watched and stopped together."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamtx.launch import suite
from streamtx.launch.children import Children
from tests.support.docsuite import made_run
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
    # The broker's port is taken: the first service exits before it is ready.
    base = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        run = subprocess.run([sys.executable, "-m", "streamtx.launch.suite", "--data-dir", str(tmp_path),
                              "--base-port", str(base)],
                             capture_output=True, text=True, timeout=120, env=python_env())
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert "broker: " in run.stdout and "before" in run.stdout and "stopped" in run.stdout, run.stdout


def test_a_setting_no_service_could_run_with_is_refused_before_any_starts(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "streamtx.launch.suite", "--data-dir", str(tmp_path),
                          "--ledger-url", "bogus://nowhere", "--base-port", str(free_port())],
                         capture_output=True, text=True, timeout=120, env=python_env())
    assert run.returncode == 1 and "not starting: " in run.stderr and "STREAMTX_LEDGER_URL" in run.stderr, run


# --- issue 37 item 3: make run honours the documented STREAMTX_* settings, or refuses them ---


def test_make_run_honours_STREAMTX_LEDGER_URL(tmp_path: Path) -> None:
    # It was overridden with DATA's files, said in one log line only.
    elsewhere = tmp_path / "elsewhere"
    work = tmp_path / "work"
    work.mkdir()
    with made_run(work, {"STREAMTX_LEDGER_URL": f"file://{elsewhere}"}):
        log = (work / "suite.log").read_text()
    assert f"ledgers in file://{elsewhere};" in log, log
    assert any(elsewhere.iterdir()) and not (work / "data" / "ledgers").exists()


def _envs(environ: dict[str, str], **args: str | None) -> dict[str, dict[str, str]]:
    ns = argparse.Namespace(**{"host": "127.0.0.1", "ledger_url": None, "cluster": None, **args})
    return suite.child_envs(ns, environ, [("broker", 9001), ("coordinator", 9000)], Path("/d"))


def test_the_suite_settings_from_the_environment() -> None:
    envs = _envs({"STREAMTX_LEDGER_URL": "kafka://k:9092"})
    assert {e["STREAMTX_LEDGER_URL"] for e in envs.values()} == {"kafka://k:9092"}
    assert _envs({"STREAMTX_LEDGER_URL": "kafka://k:9092"}, ledger_url="file:///x")[
        "broker"]["STREAMTX_LEDGER_URL"] == "file:///x"  # the option wins
    assert _envs({})["broker"]["STREAMTX_LEDGER_URL"] == "file:///d/ledgers"
    # Workers: the coordinator's only (the other services refuse more than one).
    envs = _envs({"STREAMTX_WORKERS": "4", "STREAMTX_REDIS_URL": "redis://r:6379/0"})
    assert envs["coordinator"]["STREAMTX_WORKERS"] == "4" and "STREAMTX_WORKERS" not in envs["broker"]
    # One setting for auth: every service gets the secret, and none needs a service token.
    envs = _envs({"STREAMTX_AUTH_JWT_SECRET": "s" * 32})
    assert all(e["STREAMTX_AUTH_JWT_SECRET"] == "s" * 32 for e in envs.values())


@pytest.mark.parametrize(("environ", "says"), [
    ({"STREAMTX_WORKERS": "4"}, "set STREAMTX_REDIS_URL too"),
    ({"STREAMTX_PORT": "9"}, "STREAMTX_PORT: make run gives each service its own port"),
    ({"STREAMTX_BROKER_URL": "http://x"}, "STREAMTX_BROKER_URL: make run gives"),
    ({"STREAMTX_LEDGER_URL": "memory://"}, "memory ledgers live in one process"),
    ({"STREAMTX_AUTH_JWT_SECRET": "12345"}, "STREAMTX_AUTH_JWT_SECRET (auth_jwt_secret): it is 5 bytes"),
    ({"STREAMTX_AUTH_JWT_PUBLIC_KEY": "pem"}, "set STREAMTX_SERVICE_TOKEN"),
])
def test_settings_make_run_cannot_honour_are_refused_saying_why(environ: dict[str, str], says: str) -> None:
    with pytest.raises(suite.Refused) as refused:
        _envs(environ)
    assert says in str(refused.value)


def test_a_signal_stops_the_children_and_exits_0() -> None:
    children = Children("t")
    sleeper = children.start("s", SLEEP, {})
    with pytest.raises(SystemExit) as done:
        children._signalled()
    assert done.value.code == 0 and sleeper.poll() is not None

"""A job or a ledger check that finds no ledgers fails and says where it looked (issue 22 item 8).

`make run` writes ``data/ledgers``; the Spark targets and the README passed
``data``: the jobs read nothing, exited 0 and wrote
``job_last_success_timestamp_seconds`` (a staleness alert saw a fresh run),
and ``streamtx-admin ledger check data`` reported ``clean``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from streamtx.client.admin_cli import run as admin
from streamtx.jobs import compact, histograms
from streamtx.launch import suite
from streamtx.ledger.file import FileLedgerFactory

ROOT = Path(__file__).resolve().parents[3]


def _data_dir(tmp_path: Path) -> Path:
    """A data folder laid out as `make run` leaves it: the ledgers in ``data/ledgers``."""
    data = tmp_path / "data"

    async def write() -> None:
        factory = FileLedgerFactory(str(data / "ledgers"))
        ledger = await factory.open("txnlog/c1/0")
        await ledger.append(b"\x05\x01" + bytes(16))
        await factory.close()

    asyncio.run(write())
    return data


def _no_spark(*_: object, **__: object) -> None:
    raise AssertionError("a job with nothing to read started Spark")


@pytest.mark.parametrize("job", [histograms, compact], ids=["histograms", "compact"])
def test_a_job_without_ledgers_fails_names_the_folder_and_pushes_no_success(
        job: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path)
    monkeypatch.setattr(job, "get_session", _no_spark)
    out = tmp_path / "out"
    prom = tmp_path / "job.prom"
    argv = ["--ledgers", f"file://{data}", "--out", str(out), "--prom", str(prom)]
    assert job.main(argv) == 2  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert f"no ledgers under {data}" in err and f"--ledgers file://{data / 'ledgers'}" in err, err
    assert not prom.exists() and not out.exists()

    missing = tmp_path / "nowhere"
    assert job.main(["--ledgers", f"file://{missing}", "--out", str(out)]) == 2  # type: ignore[attr-defined]
    assert f"{missing} does not exist" in capsys.readouterr().err

    argv = ["--ledgers", f"file://{data / 'ledgers'}", "--pattern", "pendingack/*", "--out", str(out)]
    assert job.main(argv) == 2  # type: ignore[attr-defined]
    assert "none of the 1 ledgers under" in capsys.readouterr().err


def test_ledger_check_of_a_folder_without_ledgers_fails(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path)
    assert asyncio.run(admin(["ledger", "check", str(data)])) == 1
    message = json.loads(capsys.readouterr().err)["message"]
    assert f"no ledgers under {data}" in message
    assert f"streamtx-admin ledger check {data / 'ledgers'}" in message
    assert asyncio.run(admin(["ledger", "repair", str(tmp_path / "nowhere"), "--all"])) == 1
    assert "does not exist" in json.loads(capsys.readouterr().err)["message"]
    assert asyncio.run(admin(["ledger", "check", str(data / "ledgers")])) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True


def test_the_spark_targets_read_where_make_run_writes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    written: dict[str, str] = {}

    class Stop(Exception):
        pass

    def start(name: str, cmd: list[str], env: dict[str, str]) -> None:
        written["url"] = env["STREAMTX_LEDGER_URL"]
        raise Stop

    monkeypatch.setattr(suite.Children, "start", lambda self, *a: start(*a))
    with pytest.raises(Stop):
        suite.main(["--data-dir", str(tmp_path)])  # what `make run DATA=...` runs
    for target in ("spark-histograms", "spark-compact"):
        dry = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"DATA={tmp_path}"],
                             capture_output=True, text=True, check=True).stdout
        line = next(t for t in dry.splitlines() if "spark-jobs/" in t)
        assert f"--ledgers {written['url']} " in line, (line, written)

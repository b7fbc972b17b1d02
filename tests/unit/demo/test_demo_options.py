"""The demo refuses what cannot run and never calls an empty run exactly once (issue 22 item 12)."""

from __future__ import annotations

import pytest

from streamtx import cli
from streamtx.demo.checker import Report
from streamtx.demo.supervisor import Options


@pytest.mark.parametrize(("args", "message"), [
    (["--workers", "0"], "argument --workers: must be at least 1, not 0"),
    (["--workers", "-2"], "argument --workers: must be at least 1, not -2"),
    (["--rate", "-1"], "argument --rate: must be 0 or more, not -1"),
])
def test_the_cli_refuses_a_demo_that_cannot_run(args: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # --workers 0 hung with no output: no worker ever processed a record.
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["demo", "reshard", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_options_refuse_no_workers() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Options(workers=0)


def test_a_run_that_wrote_nothing_is_not_ok() -> None:
    # --rate 0 printed "checker: OK, exactly once" over 0 records and exited 0.
    report = Report(written=0, observed=0)
    assert not report.ok
    assert report.render().splitlines()[-1] == "checker: NOTHING CHECKED: no record was written (--rate 0?)"
    assert Report(written=1, observed=1).ok

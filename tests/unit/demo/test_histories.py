"""The run directory's histories as the checker gets them, and the CLI's arguments."""

from __future__ import annotations

import json
from pathlib import Path

from streamtx.cli import build_parser
from streamtx.demo.checker import Written
from streamtx.demo.layout import RunConfig, generator_log, read_jsonl, worker_log
from streamtx.demo.verify import load_workers, load_written


def write_lines(path: Path, lines: list[dict[str, object]], torn: str = "") -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + torn)


def test_run_config_round_trip(tmp_path: Path) -> None:
    cfg = RunConfig.new("abc123", user_space=1000)
    cfg.save(tmp_path)
    assert RunConfig.load(tmp_path) == cfg
    assert cfg.source_topic == "search-logs-abc123" and cfg.ranges().partition_of(999) == 3


def test_torn_last_line_of_a_killed_process_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    write_lines(path, [{"a": 1}], torn='{"a": 2, "b"')
    assert list(read_jsonl(path)) == [{"a": 1}]
    assert list(read_jsonl(tmp_path / "missing.jsonl")) == []


def test_written_records_and_one_latency_per_record(tmp_path: Path) -> None:
    write_lines(generator_log(tmp_path), [
        {"lat_ms": 5.0, "r": [[0, 0, 8], [1, 0, 9]]},
        {"lat_ms": 7.5, "r": [[0, 1, 16]]},
    ])
    written, latencies = load_written(tmp_path)
    assert written == [Written(0, 0, 8), Written(1, 0, 9), Written(0, 1, 16)]
    assert latencies == [5.0, 5.0, 7.5]


def test_worker_outcomes(tmp_path: Path) -> None:
    write_lines(worker_log(tmp_path, 0), [
        {"txn": "0:1", "o": "open"}, {"txn": "0:1", "o": "wrote", "n": 3},
        {"txn": "0:1", "o": "committing"}, {"txn": "0:1", "o": "committed", "n": 3},
        {"txn": "0:2", "o": "open"}, {"txn": "0:2", "o": "aborted", "n": 2, "r": [[0, 5], [0, 6]]},
        {"txn": "0:4", "o": "open"},  # killed here ...
    ])
    write_lines(worker_log(tmp_path, 1), [
        {"txn": "0:3", "o": "open"}, {"txn": "0:3", "o": "refused", "n": 1},
        {"txn": "0:4", "o": "aborted", "n": -1, "why": "orphan of a previous life"},  # ... ended here
    ])
    h = load_workers(tmp_path)
    assert h.committed == 1
    assert h.aborted == {"0:2", "0:3", "0:4"}
    assert (h.refused, h.orphans) == (1, 1)
    assert h.last["0:1"] == "committed"


def test_cli_arguments() -> None:
    args = build_parser().parse_args(["demo", "reshard", "--chaos", "--kill-every", "3", "--zombie",
                                      "--workers", "3", "--duration", "10"])
    assert (args.chaos, args.kill_every, args.zombie) == (True, 3.0, True)
    assert (args.workers, args.duration) == (3, 10.0)
    assert args.commit_interval_ms == 500
    args = build_parser().parse_args(["verify", "--run-dir", "/tmp/r"])
    assert args.run_dir == Path("/tmp/r") and args.url is None

"""Named hand mutations: guards that once survived every test (issue 38), each with the test that kills it.

A hand mutation is one exact text replacement in one file: the guard (``original``) and what
it was mutated into (``mutated``, the guard gone). It must be *killed*: the named tests fail
with it. Each runs in a staged copy of the checkout (code and tests) under ``.mutmut/hand``,
never in the working tree, so an interrupted run (a failure, ^C, SIGTERM) leaves the files
others edit as they were; the staged file is written back in a ``finally`` too, so a
stage is never left mutated for the next run.

    python tools/hand_mutations.py            # every one (``make mutate`` runs them first)
    python tools/hand_mutations.py fsync-dir  # some, by name

One line each: ``hand NAME: killed by TEST`` (the first failing test), ``survived`` (the
tests passed: the guard is untested again) or ``stale`` (the original text is not in the
file once: the code changed, update the table); then ``hand: killed=K of N``. Exit 1
unless every one was killed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / ".mutmut" / "hand"
#: What a staged copy needs: the code's source roots, the tests, the pytest settings.
_copied = ("shared", "services", "spark-jobs", "tests", "pyproject.toml")
_source_roots = ("shared", "services", "spark-jobs")


@dataclass(frozen=True)
class HandMutation:
    """One guard removed by hand, and the tests that must notice."""

    name: str
    file: str  # repo-relative
    original: str  # must occur exactly once in ``file``
    mutated: str
    tests: tuple[str, ...]  # pytest selectors


HAND: tuple[HandMutation, ...] = (
    HandMutation(
        "bulk-resume-deleted",  # a fetch's bulk resume hands out what another cluster acked since
        "services/streamtx/broker/dispatch.py",
        "if not deleted >> start and (held_to is None or pos > held_to):",
        "if (held_to is None or pos > held_to):",
        ("tests/unit/broker/test_dispatch_resume.py",),
    ),
    HandMutation(
        "binary-produce-door",  # the binary produce (the SDK's path) stores into any transaction
        "services/streamtx/broker/routes/messages.py",
        "await check([s.partition for s in got.sections] or [0 if only is None else only])",
        "pass",
        ("tests/integration/test_txn_door.py::test_the_binary_produce_is_checked_at_the_door_as_the_json_one",),
    ),
    HandMutation(
        "fsync-dir",  # a new segment's directory entry not made durable: a power loss loses it
        "shared/streamtx/ledger/file.py",
        "        self._segs.append(seg)\n        _fsync_dir(self._dir)\n",
        "        self._segs.append(seg)\n",
        ("tests/integration/test_file_ledger_power_loss.py",),
    ),
    HandMutation(
        "compact-lease-held",  # a compaction run commits a log whose lease it lost
        "spark-jobs/streamtx/jobs/compact.py",
        "elif not held(r.ledger):",
        "elif False:",
        ("tests/unit/jobs/test_compact_runs.py::test_a_run_that_lost_its_lease_before_the_commit_commits_nothing",),
    ),
    # Issue 32: one identity per message, dispatch state changed under the lock, exact ends.
    HandMutation(
        "whole-entry-id",  # L:E of a batch entry names one unit (E, None), not its messages
        "services/streamtx/broker/subscription.py",
        "                    out += zip(repeat(part), zip(repeat(pos), range(size)))\n",
        "                    out.append((part, (pos, None)))\n",
        ("tests/unit/broker/test_message_identity.py::test_a_plain_ack_of_a_whole_batch_id_is_refused_while_a_transaction_holds_one_of_it",
         "tests/unit/broker/test_message_identity.py::test_a_transactional_ack_of_a_whole_batch_id_holds_every_message_of_it",
         "tests/unit/broker/test_message_identity.py::test_a_nack_of_a_whole_batch_id_redelivers_each_message_once"),
    ),
    HandMutation(
        "rewind-under-lock",  # a release during a fetch's read is overwritten when the read resumes
        "services/streamtx/broker/dispatch.py",
        "        self._fresh_from = None\n        if self._rewind_to is None or pos < self._rewind_to:\n"
        "            self._rewind_to = pos\n",
        "        self._fresh_from = None\n        if self.read_pos is None or pos < self.read_pos:\n"
        "            self.read_pos = pos\n",  # the release writes read_pos itself, as before
        ("tests/unit/broker/test_message_identity.py::test_a_release_while_a_fetch_reads_is_not_lost",),
    ),
    HandMutation(
        "give-back-own",  # a fetch gives back what a Failover move handed to another consumer
        "services/streamtx/broker/dispatch.py",
        "if (d := pending.get(u)) is not None and d.consumer == consumer]",
        "if (d := pending.get(u)) is not None]",
        ("tests/unit/broker/test_message_identity.py::test_a_failover_move_during_a_fetch_hands_the_moved_messages_out_once",),
    ),
    HandMutation(
        "unhold-let-go",  # a refused hold its transaction's end let go of is never given back
        "services/streamtx/broker/subscription.py",
        "                elif holder is None and u not in part.pending and u not in part.redeliver:\n",
        "                elif False:\n",
        ("tests/unit/broker/test_message_identity.py::test_a_hold_whose_transaction_ended_meanwhile_is_given_back_when_the_store_refuses",),
    ),
    HandMutation(
        "ended-txn-ack",  # an ack of a transaction that ended here holds for ever
        "services/streamtx/broker/subscription.py",
        "        if txn in self._ended:\n            raise ConflictError(",
        "        if False:\n            raise ConflictError(",
        ("tests/unit/broker/test_message_identity.py::test_a_hold_whose_transaction_ended_meanwhile_is_given_back_when_the_store_refuses",),
    ),
    HandMutation(
        "unnamed-holder",  # any transaction takes over what another transaction holds
        "services/streamtx/broker/subscription.py",
        "if holder is not None and holder not in (txn, UNNAMED):",
        "if holder is not None and holder not in (txn, UNNAMED, TxnId(0, 0)):",
        ("tests/unit/broker/test_message_identity.py::test_transaction_0_0_is_a_transaction_like_any_other",),
    ),
    HandMutation(
        "restored-reach",  # after a restart an open cumulative ack holds only its last id
        "services/streamtx/broker/subscription.py",
        "                part.held.extend_reach(txn, unit)\n                part.restored_hold(unit[0])\n",
        "                part.restored_hold(unit[0])\n",
        ("tests/unit/broker/test_message_identity.py::test_a_restored_cumulative_ack_holds_its_whole_range",),
    ),
)


def stage() -> None:
    """A fresh copy of the checkout's code and tests (the working tree's state, as the tests see it)."""
    shutil.rmtree(STAGE, ignore_errors=True)
    STAGE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in _copied:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, STAGE / name, ignore=ignore)
        else:
            shutil.copy2(src, STAGE / name)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # The staged copy first, so the tests (and the services they start) import it, not the checkout.
    env["PYTHONPATH"] = os.pathsep.join([*(str(STAGE / r) for r in _source_roots), str(STAGE)])
    return env


def _pytest(tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rf", *tests]
    return subprocess.run(cmd, cwd=STAGE, env=_env(), capture_output=True, text=True, check=False)


def run_one(m: HandMutation) -> tuple[str, str]:
    """``(outcome, detail)``: killed and the first failing test, survived, stale or error."""
    path = STAGE / m.file
    text = path.read_text()
    if text.count(m.original) != 1:
        return "stale", f"the original occurs {text.count(m.original)} times in {m.file}"
    # A kill counts only if the same tests pass with the guard in place.
    if (base := _pytest(m.tests)).returncode != 0:
        return "error", f"the tests fail without the mutation: {base.stdout[-500:]}"
    path.write_text(text.replace(m.original, m.mutated))
    try:
        got = _pytest(m.tests)
    finally:
        path.write_text(text)  # even on ^C: the stage is never left mutated
    failed = re.findall(r"^FAILED (\S+)", got.stdout, re.M)
    if got.returncode == 1 and failed:
        return "killed", failed[0]
    if got.returncode == 0:
        return "survived", " ".join(m.tests)
    return "error", f"pytest exited {got.returncode}: {got.stdout[-500:]}{got.stderr[-500:]}"


def run(names: list[str]) -> int:
    """Run the named hand mutations (all when empty); the exit status (0: every one killed)."""
    chosen = [m for m in HAND if not names or m.name in names]
    unknown = sorted(set(names) - {m.name for m in HAND})
    if unknown:
        print(f"hand: unknown {unknown}; known: {[m.name for m in HAND]}")
        return 2
    # SIGTERM as ^C: the finally blocks run and nothing stays mutated.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    stage()
    killed = 0
    for m in chosen:
        outcome, detail = run_one(m)
        killed += outcome == "killed"
        by = "by " if outcome == "killed" else ""
        print(f"hand {m.name} ({m.file}): {outcome} {by}{detail}", flush=True)
    print(f"hand: killed={killed} of {len(chosen)}")
    return 0 if killed == len(chosen) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help=f"some of {[m.name for m in HAND]} (default: all)")
    return run(p.parse_args().names)


if __name__ == "__main__":
    sys.exit(main())

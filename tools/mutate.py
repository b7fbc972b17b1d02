"""``make mutate``: mutation testing (mutmut) of the pure modules and the ledger layer.

mutmut changes one thing at a time in the code (a ``<`` into ``<=``, a constant,
a dropped call) and runs the tests that cover the changed function; a mutant
the tests still pass on *survived*: a change of behaviour no test notices.

mutmut imports the mutated copy from ``mutants/src`` and expects the code under
test in one source folder, while streamtx is one namespace package spread over
``shared/``, ``services/`` and ``spark-jobs/`` (the installed package's folders).
So this script stages a copy that has the layout mutmut wants
(``.mutmut/src/streamtx`` merged from them, ``.mutmut/tests``, a ``pyproject.toml``
with the mutmut settings and the pytest settings minus ``pythonpath``) and runs
mutmut there.

    python tools/mutate.py                 # the default modules (MODULES below)
    python tools/mutate.py records/pendingack_state.py cursor/ranges.py
    python tools/mutate.py --all           # every module in MODULES and EXTRA
    python tools/mutate.py --hand          # only the named hand mutations

First, always, the named hand mutations of ``tools/hand_mutations.py`` (guards
that once survived every test, issue 38): each must be killed, and each is listed
with the test that killed it; one that survives makes the run exit 1.

It prints every surviving mutant's name and diff (``mutmut show`` format), then
one summary line: ``mutate: killed=K survived=S no_tests=N timeout=T total=A
score=K/(K+S)``. Mutants in code no selected test runs count as ``no_tests``
and are left out of the score (docs/testing.md says how to read the output).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

from hand_mutations import run as run_hand  # tools/ is sys.path[0] when run as a script

import streamtx

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / ".mutmut"

# Pure modules and the ledger layer (paths under streamtx/), with the tests that
# drive them; a bounded default, since one run of these takes tens of minutes on
# a shared 2-core machine.
MODULES: dict[str, list[str]] = {
    "records/pendingack_state.py": ["tests/unit/pendingack/test_state.py",
                            "tests/unit/pendingack/test_state_model.py"],
    "cursor/ranges.py": ["tests/unit/test_cursor_state.py"],
    "ledger/segment.py": ["tests/unit/test_segment_codec.py", "tests/unit/test_segment_edges.py"],
    "ledger/frames.py": ["tests/unit/test_frames.py"],
    "batching/codec.py": ["tests/unit/test_batch_codec.py"],
}
# Larger ones, with --all or by name: the ledger layer over the memory backend.
EXTRA: dict[str, list[str]] = {
    "cursor/state.py": ["tests/unit/test_cursor_state.py"],
    "ledger/fenced_ledger.py": ["tests/integration/test_ledger_conformance.py",
                                "tests/integration/test_ledger_retried_append.py"],
    "ledger/memory.py": ["tests/integration/test_ledger_conformance.py"],
    "records/txnstate.py": ["tests/unit/coordinator/test_state.py"],
    "broker/txnbuffer/buffer.py": ["tests/unit/broker/test_txnbuffer.py",
                            "tests/unit/broker/test_partition_model.py"],
}


def stage(modules: list[str], tests: list[str], extra_args: list[str]) -> None:
    """A fresh copy of the code and tests in the layout mutmut expects."""
    shutil.rmtree(STAGE, ignore_errors=True)
    target = STAGE / "src" / "streamtx"
    for folder in reversed(list(streamtx.__path__)):  # the first one's modules win, as on import
        shutil.copytree(folder, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", STAGE / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    pytest_ini = {k: v for k, v in pytest_ini.items() if k not in ("pythonpath", "testpaths")}
    mutmut = {
        "source_paths": ["src"],
        "only_mutate": [f"src/streamtx/{m}" for m in modules],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", *extra_args],
    }
    (STAGE / "pyproject.toml").write_text(
        _table("tool.mutmut", mutmut) + "\n" + _table("tool.pytest.ini_options", pytest_ini)
    )


def _table(name: str, values: Mapping[str, object]) -> str:
    # JSON strings, numbers, booleans and lists of them are valid TOML values.
    return f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    return subprocess.run([mutmut, *args], cwd=STAGE, env=env, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="*", help="paths under streamtx/ (default: the MODULES set)")
    p.add_argument("--all", action="store_true", help="MODULES and EXTRA")
    p.add_argument("--hand", action="store_true", help="only the named hand mutations")
    a = p.parse_args()
    hand = run_hand([])
    if a.hand:
        return hand
    known = {**MODULES, **EXTRA}
    names = a.modules or list(known if a.all else MODULES)
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"no tests known for {unknown}; known: {sorted(known)}")
    tests = sorted({t for n in names for t in known[n]})
    # The ledger conformance suite also runs on kafka; mutants run without the tansu broker.
    stage(names, tests, ["-k", "not kafka"])
    run(["run"], check=False)
    lines = run(["results"], capture_output=True, check=True).stdout.splitlines()
    survived = [line.strip().rsplit(": ", 1)[0] for line in lines if line.strip().endswith(": survived")]
    for name in survived:
        print(run(["show", name], capture_output=True, check=False).stdout)
    run(["export-cicd-stats"], capture_output=True, check=True)
    stats = json.loads((STAGE / "mutants" / "mutmut-cicd-stats.json").read_text())
    k, s, t = stats["killed"], stats["survived"], stats["timeout"]
    print(f"modules: {' '.join(names)}")
    print(f"mutate: killed={k} survived={s} no_tests={stats['no_tests']} timeout={t} "
          f"total={stats['total']} score={k / max(1, k + s):.3f}")
    return hand


if __name__ == "__main__":
    sys.exit(main())

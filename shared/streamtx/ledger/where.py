"""Where a file store's ledgers are, and what to tell someone who pointed at a folder without any.

`make run` and the launchers keep the ledgers in ``<data dir>/ledgers``, so
the data folder itself holds none: a tool given ``data`` read nothing and
reported success. The jobs (``streamtx jobs``) and ``streamtx-admin ledger``
refuse a folder without ledgers with :func:`explain_empty`, which names the
folder and suggests ``<folder>/ledgers`` when that one has ledgers.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from streamtx.ledger.filecheck import LOCK_NAME  # every ledger folder has one


def ledger_dirs(root: str) -> list[str]:
    """The ledger folders directly under ``root`` (those with a lock file), sorted; [] when none."""
    try:
        names = os.listdir(root)
    except OSError:  # missing, not a directory, unreadable: no ledgers to list
        return []
    return sorted(os.path.join(root, d) for d in names
                  if not d.startswith(".") and os.path.isfile(os.path.join(root, d, LOCK_NAME)))


def explain_empty(root: str, use: Callable[[str], str] = str) -> str:
    """Why ``root`` has no ledgers, and where they may be instead (see the module docstring).

    ``use`` turns the suggested folder into what the caller's user types
    (a job: ``--ledgers file://<folder>``).
    """
    where = os.path.abspath(root)
    if not os.path.exists(where):
        text = f"{where} does not exist"
    elif not os.path.isdir(where):
        text = f"{where} is not a directory"
    else:
        text = f"no ledgers under {where}"
    nested = os.path.join(where, "ledgers")
    if ledger_dirs(nested):
        text += (f"; {nested} holds {len(ledger_dirs(nested))} (the launchers write <data dir>/ledgers):"
                 f" use {use(nested)}")
    return text

"""Puts the project's three import roots on sys.path for a job run from a checkout
(``spark-submit spark-jobs/<job>.py``); an installed wheel needs nothing."""

import os
import sys

_repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _root in ("spark-jobs", "shared", "services"):
    _path = os.path.join(_repo, _root)
    if _path not in sys.path:
        sys.path.insert(0, _path)

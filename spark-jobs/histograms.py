"""spark-submit entry point of the histograms job (see streamtx.jobs.histograms)."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
for _root in ("spark-jobs", "shared", "services"):
    _path = os.path.join(os.path.dirname(_here), _root)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from streamtx.jobs.histograms import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())

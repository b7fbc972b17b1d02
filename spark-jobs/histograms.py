"""spark-submit entry point of the histograms job (see streamtx.jobs.histograms)."""

import _paths  # noqa: F401  (the import roots, before streamtx is imported)
from streamtx.jobs.histograms import main

if __name__ == "__main__":
    raise SystemExit(main())

"""spark-submit entry point of the compact job (see streamtx.jobs.compact)."""

import _paths  # noqa: F401  (the import roots, before streamtx is imported)
from streamtx.jobs.compact import main

if __name__ == "__main__":
    raise SystemExit(main())

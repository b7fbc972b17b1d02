"""spark-submit entry point of the compact job (see streamtx.jobs.compact); streamtx is the installed
package (``make setup``'s editable install, or the wheel)."""

from streamtx.jobs.compact import main

if __name__ == "__main__":
    raise SystemExit(main())

"""spark-submit entry point of the histograms job (see streamtx.jobs.histograms); streamtx is the installed
package (``make setup``'s editable install, or the wheel)."""

from streamtx.jobs.histograms import main

if __name__ == "__main__":
    raise SystemExit(main())

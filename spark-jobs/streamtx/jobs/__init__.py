"""Offline jobs over the ledgers, on PySpark: ``histograms`` and ``compact``.

Run ``spark-submit spark-jobs/<job>.py --help``, ``streamtx jobs <job> --help``
or ``make spark-<job>``. :mod:`.reader` reads ledgers in parallel with the
services' replay rules; :mod:`.session` makes the Spark session and ships
the library to the executors.
"""

jobs = ("histograms", "compact")

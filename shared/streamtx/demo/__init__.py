"""The exactly-once resharding demo (docs/background.md): workload, supervisor, chaos, checker.

Pure parts (``records``, ``partitioner``, ``reorder``, ``stats``, ``checker``) know
nothing of HTTP or processes; ``generator``, ``worker``, ``supervisor`` and
``verify`` run them against a real suite.
"""

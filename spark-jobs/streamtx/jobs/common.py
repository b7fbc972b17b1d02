"""Arguments every job takes, and their parsing."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime


def time_ms(text: str) -> int:
    """Epoch milliseconds from an integer (ms) or an ISO-8601 time (UTC when no zone)."""
    if text.isdigit():
        return int(text)
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ledgers", required=True,
                   help="ledger store URL: file:///var/lib/streamtx or kafka://host:9092[?topic_prefix=...]")
    p.add_argument("--pattern", default="*",
                   help="shell pattern on ledger names, e.g. 'txnlog/*' or 'pendingack/*/orders-*' (*)")
    p.add_argument("--names", default=None,
                   help="comma-separated ledger names (needed for kafka://: topics cannot be listed by name)")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[*]; spark-submit's when submitted)")
    p.add_argument("--split-mb", type=int, default=32, help="byte range per task in large segments (32)")


def names_of(args: argparse.Namespace) -> list[str] | None:
    return [n for n in args.names.split(",") if n] if args.names else None

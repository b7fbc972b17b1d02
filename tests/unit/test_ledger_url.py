"""A ledger URL is checked without I/O when the settings are read (streamtx.ledger.check_ledger_url)."""

from __future__ import annotations

import pytest

from streamtx.errors import MalformedError
from streamtx.ledger import check_ledger_url
from streamtx.service.settings import ServiceSettings


@pytest.mark.parametrize(("url", "expected"), [
    ("memory://", ("memory", "", {})),
    ("file:///var/lib/streamtx?segment_bytes=1024", ("file", "/var/lib/streamtx", {"segment_bytes": "1024"})),
    ("file://data/ledgers", ("file", "data/ledgers", {})),
    ("kafka://k:9092/?topic_prefix=x.", ("kafka", "k:9092", {"topic_prefix": "x."})),
])
def test_good_urls(url: str, expected: tuple[str, str, dict[str, str]]) -> None:
    assert check_ledger_url(url) == expected


@pytest.mark.parametrize(("url", "says"), [
    ("bogus://x", "unknown ledger URL scheme"),
    ("/var/lib/streamtx", "unknown ledger URL scheme"),
    ("kafka://", "needs host:port"),
    ("file:///d?io_threads=many", "io_threads"),
])
def test_bad_urls_are_named_at_settings_time(url: str, says: str) -> None:
    with pytest.raises(MalformedError, match=says):
        check_ledger_url(url)
    with pytest.raises(ValueError, match=says):  # pydantic's ValidationError, at start-up
        ServiceSettings(ledger_url=url)

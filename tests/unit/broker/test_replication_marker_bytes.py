"""A replicated marker is stored as orjson writes it, whatever JSON number it holds (the OpenAPI
fuzz test's 500: ``-49373364500454540170791747584`` in a marker of ``/v1/replication/write``)."""

from __future__ import annotations

import orjson
import pytest

from streamtx.broker.replication.state import marker_bytes
from streamtx.errors import MalformedError


def test_numbers_past_64_bits_are_held_as_a_reader_of_doubles_reads_them() -> None:
    big = -49373364500454540170791747584
    marker = {"type": "x", "n": big, "deep": [{"m": 1 << 64}, (1 << 64) - 1, -(1 << 63), 10**400, True]}
    got = orjson.loads(marker_bytes(marker))
    assert got == {"type": "x", "n": float(big), "deep": [{"m": float(1 << 64)}, (1 << 64) - 1, -(1 << 63),
                                                           None, True]}
    assert orjson.loads(marker_bytes({"type": "y", "n": 5})) == {"type": "y", "n": 5}  # as before


def test_a_lone_surrogate_is_malformed() -> None:
    with pytest.raises(MalformedError):
        marker_bytes({"type": "x\ud800"})

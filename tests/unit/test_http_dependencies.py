"""httpx's async path must not search sys.path on every request.

httpcore calls ``import sniffio`` in ``current_async_library`` several times
per request. Without sniffio installed every one of those is a failed import
(failed imports are not cached): about a quarter of an httpx client's CPU in
``bench/transactions.py``. sniffio is therefore a declared dependency.
"""

from __future__ import annotations

import sys

import httpcore._synchronization as sync


def test_current_async_library_does_no_import_search() -> None:
    calls: list[str] = []

    class Spy:
        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            calls.append(name)
            return None

    spy = Spy()
    sys.meta_path.insert(0, spy)  # type: ignore[arg-type]
    try:
        import asyncio

        async def probe() -> str:
            return sync.current_async_library()

        assert asyncio.run(probe()) == "asyncio"
    finally:
        sys.meta_path.remove(spy)  # type: ignore[arg-type]
    assert "sniffio" not in calls

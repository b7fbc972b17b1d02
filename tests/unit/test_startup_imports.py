"""A service's restart imports what it needs (issue 25): most of a recovery after a crash is the
interpreter importing the service, so what only a configured feature uses waits for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import python_env


@pytest.mark.parametrize("service", ["broker", "coordinator", "pendingack"])
def test_a_service_without_auth_imports_no_jwt(service: str) -> None:
    code = f"import sys, streamtx.{service}.__main__; print('jwt' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True,
                         timeout=180, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("service", ["broker", "coordinator", "pendingack"])
def test_a_service_without_redis_imports_no_redis(service: str) -> None:
    code = f"import sys, streamtx.{service}.__main__; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True,
                         timeout=180, check=True).stdout
    assert out.strip() == "False"

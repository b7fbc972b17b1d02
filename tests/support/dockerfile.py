"""Read the instructions of the repo's Dockerfile that the tests replay (no Docker engine here)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    """One ``FROM`` stage: its base image, its ``ENV`` and its exec-form commands
    (a stage built on an earlier one starts with what that one set)."""

    base: str
    name: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    user: str | None = None
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)


def _instructions(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def parse(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for word, rest in _instructions(path.read_text()):
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) > 2 else None
            parent = next((s for s in stages if s.name == parts[0]), None)
            if parent is None:
                stages.append(Stage(base=parts[0], name=name))
            else:  # FROM an earlier stage: everything it set carries over
                stages.append(dataclasses.replace(
                    parent, name=name, env=dict(parent.env), runs=list(parent.runs)))
            continue
        stage = stages[-1]
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                stage.env[key] = value
        elif word == "RUN":
            stage.runs.append(rest)
        elif word == "USER":
            stage.user = rest
        elif word == "ENTRYPOINT":
            stage.entrypoint = json.loads(rest)
        elif word == "CMD":
            stage.cmd = json.loads(rest)
        elif word == "HEALTHCHECK":
            stage.healthcheck = json.loads(rest[rest.index("CMD ") + 4:])
    return stages

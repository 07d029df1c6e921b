"""Rehearses the build stage of deploy/docker/Dockerfile without Docker (which CI does not
have): its COPY, WORKDIR, ENV and RUN steps, in order, in a scratch directory that stands
for the image's filesystem, with the image's virtualenv (/opt/runwick) at VENV.

Run by tests/wheel_smoke.sh: ``python tests/image_build_rehearsal.py SCRATCH VENV``. It
catches what the deploy tests cannot see from the files alone: a lock file pip refuses,
a hash that does not match, a distribution that does not build from the copied sources
with the locked setuptools. The RUN steps run as written, but for the paths above and
the interpreter, which is this one (the image's is Python 3.11 too).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
IMAGE_VENV = "/opt/runwick"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", "*.egg-info", "build", "dist")
"""What Dockerfile.dockerignore keeps out of the copied directories."""
SKIPPED_ENV = {"PIP_NO_CACHE_DIR"}
"""ENV the rehearsal leaves out: pip's cache only saves downloads, it changes nothing installed."""


def build_stage() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the first stage, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    steps = []
    stages = 0
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        stages += instruction.upper() == "FROM"
        if stages > 1:
            break  # the second stage copies the first's virtualenv: nothing more to rehearse
        steps.append((instruction.upper(), rest.strip()))
    if not any(kind == "RUN" for kind, _ in steps):
        raise SystemExit(f"rehearsal: no RUN step in the build stage of {DOCKERFILE}")
    return steps


def copy_into(sources: list[str], destination: Path) -> None:
    """COPY: each source from the repository, directories whole (links kept as links)."""
    for source in sources:
        origin = ROOT / source
        target = destination / origin.name if len(sources) > 1 or destination.is_dir() else destination
        if origin.is_dir():
            shutil.copytree(origin, target, symlinks=True, ignore=IGNORED)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)


def rehearse(scratch: Path, venv: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    workdir = scratch  # the image's "/"
    env = dict(os.environ)
    for instruction, arguments in build_stage():
        if instruction == "WORKDIR":
            workdir = scratch / arguments.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "ENV":
            for name, _, value in (pair.partition("=") for pair in arguments.split()):
                if name not in SKIPPED_ENV:
                    env[name] = value
        elif instruction == "COPY":
            *sources, destination = arguments.split()
            target = workdir / destination
            if destination.endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
            copy_into(sources, target)
        elif instruction == "RUN":
            command = arguments.replace(IMAGE_VENV, str(venv))
            command = re.sub(r"^python ", f"{sys.executable} ", command)
            print(f"rehearsal: RUN {command}", flush=True)
            subprocess.run(["bash", "-c", command], cwd=workdir, env=env, check=True)
        elif instruction not in ("FROM", "ARG"):
            raise SystemExit(f"rehearsal: {instruction} in the build stage is not rehearsed; teach it here")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python tests/image_build_rehearsal.py SCRATCH_DIR VENV_DIR")
    rehearse(Path(sys.argv[1]), Path(sys.argv[2]))

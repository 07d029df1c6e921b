"""tests/image_build_rehearsal.py, which tests/wheel_smoke.sh runs to rehearse the
image's build stage without Docker: it reads the stage the Dockerfile has, and copies
the build context as Docker does. (Its RUN steps download packages: the smoke script
runs them, not this test.)"""

from __future__ import annotations

from pathlib import Path

from tests.image_build_rehearsal import IMAGE_VENV, build_stage, copy_into


def test_the_rehearsal_reads_the_first_stage_up_to_its_installs() -> None:
    steps = build_stage()
    kinds = [kind for kind, _ in steps]
    assert kinds.count("FROM") == 1, "the final stage copies the build stage's virtualenv only"
    runs = [arguments for kind, arguments in steps if kind == "RUN"]
    assert runs[0] == f"python -m venv {IMAGE_VENV}"
    assert all(IMAGE_VENV in run for run in runs)
    assert runs[-1].endswith("install --no-deps --no-build-isolation . ./packaging/coordinator")
    copied = [arguments.split()[0] for kind, arguments in steps if kind == "COPY"]
    assert {"pyproject.toml", "worker_sdk", "coordinator", "packaging/coordinator"} <= set(copied)


def test_the_rehearsal_copies_the_coordinators_link_as_a_link(tmp_path: Path) -> None:
    """Docker copies a symbolic link as a link, so runwick-coordinator's `coordinator`
    must point at the copied package beside it, as in the checkout."""
    src = tmp_path / "src"
    src.mkdir()
    copy_into(["pyproject.toml", "README.md"], src)
    copy_into(["coordinator"], src / "coordinator")
    copy_into(["packaging/coordinator"], src / "packaging" / "coordinator")
    link = src / "packaging" / "coordinator" / "coordinator"
    assert link.is_symlink() and link.resolve() == (src / "coordinator").resolve()
    assert (link / "store" / "alembic" / "versions").is_dir()
    assert (src / "pyproject.toml").is_file() and (src / "README.md").is_file()
    assert not list(src.rglob("__pycache__")), "the dockerignore keeps bytecode out"

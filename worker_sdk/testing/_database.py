"""The test coordinator's SQLite file, copied from one migrated once per process.

Migrating a new SQLite file takes a good part of a test coordinator's start (Alembic
runs every migration); copying a migrated empty one, then only checking its schema,
takes a few milliseconds. The template lives in a temporary directory removed when the
process exits.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

from worker_sdk.testing._errors import MISSING_EXTRA

try:
    from coordinator.domain.bounds import StoreBounds
    from coordinator.store import Store
except ImportError as missing:  # pragma: no cover - _coordinator says so first
    raise ImportError(MISSING_EXTRA) from missing

_lock = threading.Lock()
_templates: dict[str, Path] = {}
"""The migrated template, once made (under ``_lock``)."""


def open_test_store(path: Path, bounds: StoreBounds) -> Store:
    """Opens the store at ``path``: a new file is a copy of the migrated template, an
    existing one is migrated as ``runwick serve`` would. Blocking: run it on a thread."""
    if path.exists():
        return Store.open(f"sqlite:///{path}", bounds=bounds)
    source = sqlite3.connect(_migrated_template())
    target = sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return Store.open(f"sqlite:///{path}", create=False, bounds=bounds)


def _migrated_template() -> Path:
    with _lock:
        if "sqlite" not in _templates:
            directory = Path(tempfile.mkdtemp(prefix="runwick-test-template-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            template = directory / "template.db"
            Store.open(f"sqlite:///{template}").close()
            _templates["sqlite"] = template
        return _templates["sqlite"]

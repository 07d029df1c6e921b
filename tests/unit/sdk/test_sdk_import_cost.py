"""``import worker_sdk`` stays light (issue 42): prometheus_client and OpenTelemetry load
only when a Worker or a trace first needs them, in a fresh process as a service's first
import. Speed itself is measured by tests/wheel_smoke.sh, never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import worker_sdk

ROOT = Path(worker_sdk.__file__).resolve().parent.parent
LOADED = "print(sorted({m.split('.')[0] for m in sys.modules} & {'prometheus_client', 'opentelemetry'}))"


def _loaded_after(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RUNWICK_OTEL", None)
    script = f"import sys\n{code}\n{LOADED}"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    return out.stdout.strip()


def test_import_loads_neither_metrics_nor_tracing() -> None:
    assert _loaded_after("import worker_sdk") == "[]"


def test_every_public_name_resolves_without_loading_them() -> None:
    code = "import worker_sdk\nfor name in worker_sdk.__all__: getattr(worker_sdk, name)"
    assert _loaded_after(code) == "[]"


def test_a_client_loads_neither() -> None:
    code = "import worker_sdk\nworker_sdk.Client('127.0.0.1:1', token='rwk_x').close()"
    assert _loaded_after(code) == "[]"


def test_a_worker_registers_its_metrics_when_made() -> None:
    code = (
        "import worker_sdk, prometheus_client\n"
        "before = prometheus_client.REGISTRY.get_sample_value('runwick_worker_connected_streams')\n"
        "worker_sdk.Worker('127.0.0.1:1', token='rwk_x', queues=['q'])\n"
        "print(before, prometheus_client.REGISTRY.get_sample_value('runwick_worker_connected_streams'))"
    )
    assert _loaded_after(code).splitlines() == ["None 0.0", "['prometheus_client']"]

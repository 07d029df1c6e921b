"""The test coordinator's own errors (importable without the coordinator extra)."""

from __future__ import annotations


class NotIdle(RuntimeError):
    """The test coordinator did not reach the state a call waits for within its bound:
    ``run_until_idle`` found jobs still runnable or running, or ``advance`` found a
    heartbeat or a claim unanswered. The message names what was still going on."""


MISSING_EXTRA = (
    "worker_sdk.testing.Coordinator runs a real coordinator in-process and needs the "
    "coordinator's dependencies: pip install 'runwick[testing]' (in a checkout: "
    'pip install -e ".[testing]" -e ./packaging/coordinator)'
)

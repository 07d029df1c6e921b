"""Pins the SDK's public names: adding or removing one is an API decision, made here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import worker_sdk
import worker_sdk.grammar
import worker_sdk.testing

EXPECTED = [
    "AlreadyExists",
    "ArgumentError",
    "AsyncClient",
    "AttemptInfo",
    "AuditEvent",
    "BackgroundWorker",
    "BulkResult",
    "CallNext",
    "CancelCause",
    "CatchUp",
    "Client",
    "ConnectionOptions",
    "CoordinatorError",
    "CoordinatorUnavailable",
    "CreatedToken",
    "EnqueueItem",
    "EnqueuedJob",
    "Failed",
    "FailedPrecondition",
    "FieldViolation",
    "JobCancelled",
    "JobConfig",
    "JobContext",
    "JobInfo",
    "JobNotFound",
    "JobResult",
    "JobSettings",
    "JobState",
    "MessageTooLarge",
    "MetricsHttpLimits",
    "Middleware",
    "Outcome",
    "PayloadTooLarge",
    "PermanentJobFailure",
    "PermissionDenied",
    "ProgressReport",
    "QueueInfo",
    "QueueLimitReached",
    "QueueRateInfo",
    "Retry",
    "RevealedError",
    "RunwickError",
    "ScheduleInfo",
    "SkippedJob",
    "Success",
    "TokenInfo",
    "Unauthenticated",
    "Upgrader",
    "Worker",
    "WorkerInfo",
    "WorkerListing",
    "configure_logging",
    "job",
    "new_job_id",
]


def test_package_exports() -> None:
    assert sorted(worker_sdk.__all__) == EXPECTED
    for name in worker_sdk.__all__:
        assert getattr(worker_sdk, name) is not None, name


ADMIN_CALLS = ["create_token", "list_audit_events", "list_tokens", "purge_jobs", "revoke_token"]


def test_clients_have_the_admin_calls() -> None:
    """Both clients carry the same admin calls (R-19 added ``purge_jobs``)."""
    for client in (worker_sdk.Client, worker_sdk.AsyncClient):
        assert [name for name in ADMIN_CALLS if callable(getattr(client, name, None))] == ADMIN_CALLS


def test_public_names_have_no_private_siblings() -> None:
    # "@py_builtins" and "@pytest_ar": pytest rewrites the asserts of a plugin's whole
    # distribution, and the SDK's is one once installed (worker_sdk.testing.pytest_plugin).
    public = {name for name in dir(worker_sdk) if not name.startswith(("_", "@"))}
    assert public - set(worker_sdk.__all__) <= {
        "proto",
        "testing",
        "grammar",
        "progress_rules",
        "trace_rules",
        "outbox",  # the optional subpackage (SQLAlchemy), an attribute once another test imported it
        "annotations",
    }


def test_testing_exports() -> None:
    assert sorted(worker_sdk.testing.__all__) == [
        "AsyncCoordinator",
        "Coordinator",
        "HandlerRun",
        "NotIdle",
        "RawPayload",
        "run_handler",
        "run_handler_sync",
    ]


def test_grammar_exports() -> None:
    """The wire grammar the coordinator shares (names, codes, truncation)."""
    assert sorted(worker_sdk.grammar.__all__) == [
        "CODE_PATTERN",
        "KEY_PUNCTUATION",
        "MAX_CODE_LENGTH",
        "MAX_FAILURE_DETAIL_BYTES",
        "MAX_FAILURE_MESSAGE_BYTES",
        "MAX_NAME_UTF16_UNITS",
        "NAME_PUNCTUATION",
        "NameFault",
        "NameProblem",
        "TRUNCATION_MARKER",
        "coerce_code",
        "concurrency_key_problem",
        "is_name_character",
        "is_valid_code",
        "name_problem",
        "truncate_utf8",
        "utf16_length",
    ]
    # "@": pytest's assertion rewriting, as above.
    public = {name for name in vars(worker_sdk.grammar) if not name.startswith(("_", "@"))}
    imported = {"annotations", "dataclass", "functools", "re", "StrEnum"}
    assert public - set(worker_sdk.grammar.__all__) <= imported


def test_exceptions_share_one_root() -> None:
    errors = [getattr(worker_sdk, name) for name in worker_sdk.__all__]
    exceptions = [e for e in errors if isinstance(e, type) and issubclass(e, BaseException)]
    assert len(exceptions) == 14
    assert all(issubclass(e, worker_sdk.RunwickError) for e in exceptions)


def test_sdk_does_not_import_the_coordinator_or_sqlalchemy() -> None:
    root = Path(worker_sdk.__file__).resolve().parent.parent
    code = (
        "import sys, worker_sdk, worker_sdk.testing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'coordinator', 'sqlalchemy'}))"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"

"""R-22: exception text stays out of logs at INFO and above and out of metric labels, on
the coordinator and in the SDK, while a reveal still returns it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from tests.integration.conftest import Coordinator
from worker_sdk import AsyncClient, JobContext, JobState, PermanentJobFailure, Worker, job

SECRET = "s3cr3t-IBAN-DE89370400440532013000"


@job("tests.leaky", max_executions=2)
@dataclass
class Leaky:
    permanent: bool


class LeakyError(Exception):
    pass


def _label_values(registry: CollectorRegistry) -> list[str]:
    return [value for metric in registry.collect() for s in metric.samples for value in s.labels.values()]


async def test_r22_error_text_is_in_no_log_line_at_info_and_in_no_metric_label(
    coordinator: Coordinator, client: AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client.configure_job(Leaky).with_retry_delay(timedelta(milliseconds=1), timedelta(milliseconds=1))
    worker = Worker(coordinator.target, lease=timedelta(seconds=10), worker_id="leaky-worker")

    @worker.handler(Leaky)
    async def leak(payload: Leaky, ctx: JobContext) -> None:
        if payload.permanent:
            raise PermanentJobFailure("bad_account", f"account {SECRET} is closed")
        raise LeakyError(f"could not charge {SECRET}")

    async with worker:
        retried = await client.enqueue(Leaky(permanent=False))
        permanent = await client.enqueue(Leaky(permanent=True))
        results = [await client.wait(job_id, timedelta(seconds=30)) for job_id in (retried, permanent)]

    assert [r.state for r in results] == [JobState.FAILED, JobState.FAILED]
    attempts = await client.attempts(retried) + await client.attempts(permanent)
    assert len(attempts) == 3
    revealed = [await client.reveal_error(a.id) for a in attempts]
    assert all(SECRET in r.message and SECRET in r.detail for r in revealed)  # the text exists

    formatter = logging.Formatter("%(name)s %(message)s")
    loud = [formatter.format(r) for r in caplog.records if r.levelno >= logging.INFO]
    assert loud, "nothing was logged at INFO: the test would prove nothing"
    assert [line for line in loud if SECRET in line] == []
    registries = [REGISTRY, coordinator.running.metrics.registry]
    assert [v for registry in registries for v in _label_values(registry) if SECRET in v] == []

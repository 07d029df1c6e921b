"""``runwick serve`` takes docs/limits.md bounds from a config file, the environment and flags."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.worker_app import Echo
from tests.support import serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import ArgumentError, AsyncClient, PayloadTooLarge
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

pytestmark = pytest.mark.slow


async def test_s5_serve_applies_bounds_from_file_environment_and_flags(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "runwick.toml"
    config.write_text("[bounds]\nmax_payload_bytes = 100\nmax_page_size = 50\n")
    log = tmp_path / "serve.log"
    process = serve(
        log,
        *("--database-url", database_url),
        *("--insecure", "--port", "0", *NO_FIXED_PORTS),
        *("--config", str(config), "--max-enqueue-batch", "4"),
        env={**os.environ, "RUNWICK_MAX_PAGE_SIZE": "3"},  # over the file's 50
    )
    try:
        target = await wait_listening(process, log)
        async with AsyncClient(target) as client:
            with pytest.raises(PayloadTooLarge) as too_large:  # the file
                await client.enqueue(Echo("x" * 100))
            with pytest.raises(ArgumentError) as too_many:  # the flag
                await client.enqueue_many([Echo("a")] * 5)
            await client.enqueue_many([Echo("a")] * 4)
            stub = job_service_pb2_grpc.JobServiceStub(client._channel)
            page = await stub.ListJobs(job_service_pb2.ListJobsRequest(page_size=100))  # the environment
    finally:
        await stop(process)
    assert too_large.value.limit_bytes == 100
    assert too_many.value.reason == "BATCH_TOO_LARGE"
    assert len(page.jobs) == 3

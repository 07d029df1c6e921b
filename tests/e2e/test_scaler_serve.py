"""``runwick serve --scaler-port``: the port is named on the start-up line and answers
KEDA's calls without a token; a taken scaler port is named with its flag before any
database is made. Every ``serve`` is a real subprocess."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import grpc
import pytest

from tests.e2e.cli import runwick
from tests.e2e.test_serve_output import clean_env
from tests.support import serve, stop, wait_for_line, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk.proto.keda import externalscaler_pb2 as pb
from worker_sdk.proto.keda import externalscaler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow

NO_OTHER_PORTS = ("--port", "0", *NO_FIXED_PORTS)


async def test_serve_names_the_scaler_port_and_it_answers_without_a_token(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    # Authentication on (a bootstrap token written to a file): the scaler asks for none.
    process = serve(
        log,
        "--database-url",
        database,
        "--admin-token-file",
        str(tmp_path / "admin-token"),
        *NO_OTHER_PORTS,
        "--scaler-port",
        "0",
        env=clean_env(),
    )
    try:
        await wait_listening(process, log)
        line = await wait_for_line(process, log, "scaler port ")
        match = re.search(r"scaler port (\d+)", line)
        assert match, line
        async with grpc.aio.insecure_channel(f"127.0.0.1:{match.group(1)}") as channel:
            ref = pb.ScaledObjectRef(name="workers", scalerMetadata={"queue": "default"})
            answer = await pb_grpc.ExternalScalerStub(channel).IsActive(ref, timeout=10)
        assert answer.result is False
    finally:
        assert await stop(process) == 0


async def test_a_taken_scaler_port_is_named_with_its_flag(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    database = tmp_path / "never.db"
    try:
        result = await runwick(
            "serve",
            "--insecure",
            "--database-url",
            f"sqlite:///{database}",
            *NO_OTHER_PORTS,
            "--scaler-port",
            str(taken),
            check=False,
        )
    finally:
        holder.close()
    assert result.returncode == 2, result.stderr
    assert f"port {taken}" in result.stderr and "--scaler-port" in result.stderr
    assert not database.exists()

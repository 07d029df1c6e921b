"""TLS and mutual TLS on the API port (R-20), with certificates made here by the
``cryptography`` package: a CA, a server certificate for 127.0.0.1, and a client one."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.worker_app import Echo
from tests.support import eventually_async
from worker_sdk import AsyncClient, CoordinatorUnavailable, JobContext, JobState, Worker

WAIT = timedelta(seconds=30)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    """A client certificate from another CA: mutual TLS must refuse it."""
    stranger_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.now(UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca_key, other_ca_key = _key(), _key()
    ca = _certificate("runwick test CA", ca_key, None)
    other_ca = _certificate("some other CA", other_ca_key, None)
    server_key, client_key, stranger_key = _key(), _key(), _key()
    server = _certificate(
        "coordinator", server_key, (ca.subject, ca_key), usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    client = _certificate("worker-1", client_key, (ca.subject, ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _certificate(
        "stranger", stranger_key, (other_ca.subject, other_ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    ca_path, _ = _write(directory, "ca", ca, ca_key)
    server_cert, server_key_path = _write(directory, "server", server, server_key)
    client_cert, client_key_path = _write(directory, "client", client, client_key)
    stranger_cert, stranger_key_path = _write(directory, "stranger", stranger, stranger_key)
    return Pki(
        ca_path, server_cert, server_key_path, client_cert, client_key_path, stranger_cert, stranger_key_path
    )


async def _start(database_url: str, pki: Pki, *, mutual: bool) -> RunningCoordinator:
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        auth_enabled=True,
        drain_timeout_s=1,
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca) if mutual else None,
    )
    return await start_coordinator(config)


@pytest.fixture
async def tls_coordinator(database_url: str, pki: Pki) -> AsyncIterator[RunningCoordinator]:
    running = await _start(database_url, pki, mutual=False)
    yield running
    await running.stop(grace_s=1)


@pytest.fixture
async def mtls_coordinator(database_url: str, pki: Pki) -> AsyncIterator[RunningCoordinator]:
    running = await _start(database_url, pki, mutual=True)
    yield running
    await running.stop(grace_s=1)


async def test_r20_tls_serves_clients_that_trust_the_ca_and_only_over_tls(
    tls_coordinator: RunningCoordinator, pki: Pki
) -> None:
    token = tls_coordinator.bootstrap_token
    async with AsyncClient(tls_coordinator.target, token=token, ca=pki.ca) as client:
        job_id = await client.enqueue(Echo("over tls"))
        assert (await client.get(job_id)).state is JobState.AVAILABLE

    short = timedelta(seconds=3)
    async with AsyncClient(tls_coordinator.target, token=token, rpc_timeout=short) as plaintext:
        with pytest.raises(CoordinatorUnavailable):
            await plaintext.get(job_id)
    untrusting = AsyncClient(tls_coordinator.target, token=token, ca=pki.stranger_cert, rpc_timeout=short)
    async with untrusting:
        with pytest.raises(CoordinatorUnavailable):
            await untrusting.get(job_id)


async def test_r20_mutual_tls_needs_a_client_certificate_signed_by_the_client_ca(
    mtls_coordinator: RunningCoordinator, pki: Pki
) -> None:
    token = mtls_coordinator.bootstrap_token
    short = timedelta(seconds=3)
    async with AsyncClient(mtls_coordinator.target, token=token, ca=pki.ca, rpc_timeout=short) as anonymous:
        with pytest.raises(CoordinatorUnavailable):
            await anonymous.enqueue(Echo("no certificate"))
    stranger = AsyncClient(
        mtls_coordinator.target,
        token=token,
        ca=pki.ca,
        cert=pki.stranger_cert,
        key=pki.stranger_key,
        rpc_timeout=short,
    )
    async with stranger:
        with pytest.raises(CoordinatorUnavailable):
            await stranger.enqueue(Echo("wrong CA"))

    worker = Worker(
        mtls_coordinator.target,
        token=token,
        ca=pki.ca,
        cert=pki.client_cert.read_bytes(),  # paths and PEM bytes both work
        key=pki.client_key.read_text(),
        lease=timedelta(seconds=10),
    )

    @worker.handler(Echo)
    async def echo(payload: Echo, ctx: JobContext) -> bytes:
        return payload.text.encode()

    async with (
        AsyncClient(
            mtls_coordinator.target, token=token, ca=pki.ca, cert=pki.client_cert, key=pki.client_key
        ) as client,
        worker,
    ):
        job_id = await client.enqueue(Echo("over mutual tls"))
        info = await client.wait(job_id, WAIT)
    assert (info.state, info.output) == (JobState.SUCCEEDED, b"over mutual tls")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tls_cert_file": "server.crt"}, "both --tls-cert and --tls-key"),
        ({"tls_client_ca_file": "ca.crt"}, "needs TLS"),
    ],
)
async def test_half_configured_tls_is_refused(changes: dict[str, str], message: str, tmp_path: Path) -> None:
    config = CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'x.db'}", port=0, **changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        await start_coordinator(config)


async def test_a_tls_reload_interval_of_zero_is_refused(tmp_path: Path) -> None:
    config = CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'x.db'}", port=0, tls_reload_interval_s=0)
    with pytest.raises(ConfigError, match="tls_reload_interval_s"):
        await start_coordinator(config)


async def test_a_missing_certificate_file_is_an_os_error(tmp_path: Path) -> None:
    config = CoordinatorConfig(
        database_url=f"sqlite:///{tmp_path / 'x.db'}",
        port=0,
        tls_cert_file=str(tmp_path / "missing.crt"),
        tls_key_file=str(tmp_path / "missing.key"),
    )
    with pytest.raises(OSError):
        await start_coordinator(config)


# -- certificates renewed in place (cert-manager) serve new connections without a restart ---------


@dataclass(frozen=True)
class Issued:
    """A server certificate for 127.0.0.1, the CA that signed it, and their files."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    serial: int


def _issue(ca_name: str) -> Issued:
    ca_key, key = _key(), _key()
    ca = _certificate(ca_name, ca_key, None)
    cert = _certificate("coordinator", key, (ca.subject, ca_key), usage=ExtendedKeyUsageOID.SERVER_AUTH)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem = serialization.Encoding.PEM
    return Issued(ca.public_bytes(pem), cert.public_bytes(pem), key_pem, cert.serial_number)


def _install(directory: Path, issued: Issued) -> None:
    """Replaces the files as a renewal does: each written aside, then renamed over the old."""
    for name, data in (("tls.crt", issued.cert_pem), ("tls.key", issued.key_pem)):
        aside = directory / f".{name}.new"
        aside.write_bytes(data)
        os.replace(aside, directory / name)


def _handshake_serial(port: int) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # any certificate: the test reads which one it is
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


async def _served_serial(port: int) -> int:
    """The serial number of the certificate a new TLS connection to ``port`` is shown
    (the blocking handshake in a thread: the servers run on this event loop)."""
    return await asyncio.to_thread(_handshake_serial, port)


async def _health(channel: grpc.aio.Channel) -> bool:
    answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def _trusting(target: str, issued: Issued) -> grpc.aio.Channel:
    """A channel on its own connection trusting only ``issued``'s CA."""
    credentials = grpc.ssl_channel_credentials(root_certificates=issued.ca_pem)
    return grpc.aio.secure_channel(target, credentials, options=[("grpc.use_local_subchannel_pool", 1)])


@pytest.fixture
async def renewing(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[RunningCoordinator, Path, Issued]]:
    """A coordinator serving TLS from files in a directory the test renews, with the
    dashboard and /metrics over HTTPS too."""
    first = _issue("first CA")
    _install(tmp_path, first)
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        drain_timeout_s=1,
        tls_cert_file=str(tmp_path / "tls.crt"),
        tls_key_file=str(tmp_path / "tls.key"),
        dashboard_port=0,
        metrics_port=0,
        metrics_tls=True,
        tls_reload_interval_s=0.05,
    )
    running = await start_coordinator(config)
    yield running, tmp_path, first
    await running.stop(grace_s=1)


async def test_a_renewed_certificate_serves_new_connections_and_open_ones_keep_theirs(
    renewing: tuple[RunningCoordinator, Path, Issued],
) -> None:
    running, directory, first = renewing
    assert await _served_serial(running.port) == first.serial
    async with _trusting(running.target, first) as before:
        assert await _health(before)
        second = _issue("second CA")  # another CA: only a new handshake can trust it
        _install(directory, second)

        assert await _served_serial(running.port) == second.serial
        async with _trusting(running.target, second) as after:
            assert await _health(after)
        async with _trusting(running.target, first) as stale:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _health(stale)
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        # The connection made before the renewal goes on with the first certificate.
        assert await _health(before)


async def _renewed(port: int, issued: Issued) -> bool:
    return await _served_serial(port) == issued.serial


async def test_the_https_ports_serve_a_renewed_certificate_too(
    renewing: tuple[RunningCoordinator, Path, Issued],
) -> None:
    running, directory, first = renewing
    assert running.dashboard_port is not None and running.metrics_port is not None
    https_ports = (running.dashboard_port, running.metrics_port)
    assert [await _served_serial(port) for port in https_ports] == [first.serial] * 2
    second = _issue("second CA")
    _install(directory, second)
    for port in https_ports:
        await eventually_async(
            lambda port=port: _renewed(port, second),  # type: ignore[misc]
            what=f"port {port} to serve the renewed certificate",
        )


async def test_a_half_written_renewal_keeps_the_old_certificate_and_warns(
    renewing: tuple[RunningCoordinator, Path, Issued], caplog: pytest.LogCaptureFixture
) -> None:
    running, directory, first = renewing
    second = _issue("second CA")
    (directory / "tls.key").write_bytes(second.key_pem)  # the key renewed, the certificate half written
    (directory / "tls.crt").write_bytes(second.cert_pem[: len(second.cert_pem) // 2])
    with caplog.at_level(logging.WARNING, logger="coordinator.api.tls"):
        assert await _served_serial(running.port) == first.serial
        await asyncio.sleep(0.2)  # the HTTPS ports' look at the files too
    assert running.dashboard_port is not None
    assert await _served_serial(running.dashboard_port) == first.serial
    assert any("do not load" in record.getMessage() for record in caplog.records)
    async with _trusting(running.target, first) as channel:
        assert await _health(channel)

    _install(directory, second)  # the renewal completes
    assert await _served_serial(running.port) == second.serial

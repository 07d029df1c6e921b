"""TLS and mutual TLS on the API port (R-20), with certificates made here by the
``cryptography`` package: a CA, a server certificate for 127.0.0.1, and a client one."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.worker_app import Echo
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


async def test_a_missing_certificate_file_is_an_os_error(tmp_path: Path) -> None:
    config = CoordinatorConfig(
        database_url=f"sqlite:///{tmp_path / 'x.db'}",
        port=0,
        tls_cert_file=str(tmp_path / "missing.crt"),
        tls_key_file=str(tmp_path / "missing.key"),
    )
    with pytest.raises(OSError):
        await start_coordinator(config)

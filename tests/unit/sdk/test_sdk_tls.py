"""TLS arguments of the clients and the Worker: what may be combined, and clear errors."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from worker_sdk import ArgumentError, Client, Worker
from worker_sdk._tls import channel_credentials

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_no_tls_arguments_means_plaintext() -> None:
    assert channel_credentials() is None


def test_a_ca_a_certificate_or_tls_alone_means_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    assert isinstance(channel_credentials(ca=ca), grpc.ChannelCredentials)
    assert isinstance(channel_credentials(ca=str(ca)), grpc.ChannelCredentials)
    assert isinstance(channel_credentials(ca=PEM.decode()), grpc.ChannelCredentials)  # PEM text
    assert isinstance(channel_credentials(tls=True), grpc.ChannelCredentials)  # system roots
    assert isinstance(channel_credentials(cert=PEM, key=PEM), grpc.ChannelCredentials)


def test_inconsistent_tls_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="needs its private key"):
        channel_credentials(cert=PEM)
    with pytest.raises(ArgumentError, match="needs its private key"):
        channel_credentials(key=PEM)
    with pytest.raises(ArgumentError, match="not both"):
        channel_credentials(credentials=grpc.ssl_channel_credentials(), ca=PEM)
    with pytest.raises(ArgumentError, match="cannot read ca file"):
        channel_credentials(ca=tmp_path / "missing.pem")


def test_clients_and_workers_check_them_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="needs its private key"):
        Client("127.0.0.1:1", cert=PEM)
    with pytest.raises(ArgumentError, match="cannot read"):
        Worker("127.0.0.1:1", ca=tmp_path / "missing.pem")
    Client("127.0.0.1:1", ca=PEM, token="rwk_x").close()

"""Connection arguments of the clients and the Worker (``ConnectionOptions``): TLS, what
may be combined, clear errors, and the one channel factory."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from worker_sdk import ArgumentError, AsyncClient, Client, ConnectionOptions, Worker

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
TARGET = "127.0.0.1:1"


def test_no_tls_arguments_means_plaintext() -> None:
    assert not ConnectionOptions(TARGET).secure


def test_a_ca_a_certificate_or_tls_alone_means_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    assert ConnectionOptions(TARGET, ca=ca).secure
    assert ConnectionOptions(TARGET, ca=str(ca)).secure
    assert ConnectionOptions(TARGET, ca=PEM.decode()).secure  # PEM text
    assert ConnectionOptions(TARGET, tls=True).secure  # system roots
    assert ConnectionOptions(TARGET, cert=PEM, key=PEM).secure
    assert ConnectionOptions(TARGET, credentials=grpc.ssl_channel_credentials()).secure


def test_inconsistent_tls_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="needs its private key"):
        ConnectionOptions(TARGET, cert=PEM)
    with pytest.raises(ArgumentError, match="needs its private key"):
        ConnectionOptions(TARGET, key=PEM)
    with pytest.raises(ArgumentError, match="not both"):
        ConnectionOptions(TARGET, credentials=grpc.ssl_channel_credentials(), ca=PEM)
    with pytest.raises(ArgumentError, match="cannot read ca file"):
        ConnectionOptions(TARGET, ca=tmp_path / "missing.pem")


def test_clients_and_workers_check_them_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="needs its private key"):
        Client(TARGET, cert=PEM)
    with pytest.raises(ArgumentError, match="cannot read"):
        Worker(TARGET, ca=tmp_path / "missing.pem")
    Client(TARGET, ca=PEM, token="rwk_x").close()
    Client(TARGET, tls=True).close()


def test_the_token_becomes_bearer_metadata() -> None:
    assert ConnectionOptions(TARGET).metadata == ()
    assert ConnectionOptions(TARGET, token="rwk_a").metadata == (("authorization", "Bearer rwk_a"),)
    for bad in ("", "two\nlines"):
        with pytest.raises(ArgumentError, match="token"):
            ConnectionOptions(TARGET, token=bad)


def test_options_are_frozen_values() -> None:
    options = ConnectionOptions(TARGET, token="t", channel_options=[("grpc.primary_user_agent", "x")])
    assert options == ConnectionOptions(
        TARGET, token="t", channel_options=(("grpc.primary_user_agent", "x"),)
    )
    assert options.channel_options == (("grpc.primary_user_agent", "x"),)
    with pytest.raises(AttributeError):
        options.target = "elsewhere"  # type: ignore[misc]


def test_clients_and_workers_take_ready_made_options() -> None:
    options = ConnectionOptions(TARGET, token="rwk_a", channel_options=[("grpc.primary_user_agent", "x")])
    with Client(options) as client:
        assert client._call_kwargs()["metadata"] == options.metadata
    Worker(options)
    for extra in ({"token": "rwk_b"}, {"tls": True}, {"ca": PEM}, {"options": [("grpc.a", 1)]}):
        with pytest.raises(ArgumentError, match="not both"):
            Client(options, **extra)  # type: ignore[arg-type]
        with pytest.raises(ArgumentError, match="not both"):
            Worker(options, **extra)  # type: ignore[arg-type]


async def test_one_factory_opens_blocking_and_aio_channels() -> None:
    options = ConnectionOptions(TARGET)
    async with AsyncClient(options) as client:
        assert isinstance(client._channel, grpc.aio.Channel)
    aio_channel = options.open_aio_channel()
    assert isinstance(aio_channel, grpc.aio.Channel)
    await aio_channel.close()
    with options.open_channel() as channel:
        assert isinstance(channel, grpc.Channel)

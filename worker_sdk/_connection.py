"""How the SDK reaches the coordinator: ``ConnectionOptions`` and the one channel factory.

``Client``, ``AsyncClient`` and ``Worker`` take the same connection arguments (target,
bearer token, TLS material, channel options) and turn them into a ``ConnectionOptions``;
each opens its channel with ``ConnectionOptions.open_channel`` (blocking) or
``open_aio_channel`` (asyncio). Tools that build the connection from flags or a config
file (the ``runwick`` command) make one ``ConnectionOptions`` and hand it to a client.

Each of ``ca``, ``cert`` and ``key`` is a path to a PEM file, PEM text (a str starting
with ``-----BEGIN``) or PEM bytes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from worker_sdk._errors import ArgumentError

logger = logging.getLogger(__name__)

PemSource = str | os.PathLike[str] | bytes
"""A path to a PEM file, PEM text, or PEM bytes."""

DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    # No client-side size limits (-1): the coordinator sizes its own from its bounds
    # (docs/limits.md), so a request is judged there, with the bound's clear error.
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)
"""Keepalive and message-size options every SDK channel starts from."""


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """Where the coordinator is and how to talk to it: address, token, TLS, channel options.

    The options are checked, and PEM files read, when they are built: a bad combination
    fails here, not on the first call. Pass them to ``Client``, ``AsyncClient`` or
    ``Worker`` in place of the target (with no other connection arguments)::

        connection = ConnectionOptions("runwick:7233", token=os.environ["RUNWICK_TOKEN"], ca="ca.pem")
        client = Client(connection)

    Attributes:
        target: The coordinator address, e.g. ``"runwick:7233"``.
        token: Bearer token sent with every call (R-20); None for an insecure coordinator.
        ca: TLS: the CA that signed the coordinator's certificate (path or PEM); None
            trusts the system's roots when TLS is on.
        cert: Mutual TLS: the client's certificate chain (path or PEM); needs ``key``.
        key: Mutual TLS: the private key of ``cert``.
        tls: Speak TLS trusting the system's roots even when no PEM material is given
            (``ca`` or ``cert`` turn TLS on by themselves).
        credentials: Ready-made TLS channel credentials; exclusive with ``ca``/``cert``/
            ``key``.
        channel_options: Extra gRPC channel options; they override
            ``DEFAULT_CHANNEL_OPTIONS`` (keepalive, no client-side size limits).

    Raises:
        ArgumentError: The token is not one line, the TLS arguments are inconsistent, or
            a PEM file cannot be read.
    """

    target: str
    token: str | None = None
    ca: PemSource | None = None
    cert: PemSource | None = None
    key: PemSource | None = None
    tls: bool = False
    credentials: grpc.ChannelCredentials | None = None
    channel_options: Sequence[tuple[str, Any]] = ()
    _resolved: grpc.ChannelCredentials | None = field(init=False, repr=False, compare=False)
    _metadata: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.target, str):
            raise ArgumentError(f"target must be a str host:port, got {type(self.target).__name__}")
        object.__setattr__(self, "channel_options", tuple(self.channel_options))
        object.__setattr__(self, "_resolved", _channel_credentials(self))
        object.__setattr__(self, "_metadata", _auth_metadata(self.token))

    @property
    def secure(self) -> bool:
        """True when the channel speaks TLS, False for plaintext."""
        return self._resolved is not None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata carrying the bearer token; empty without a token.

        The SDK's clients and worker send it with every call; pass it yourself with
        calls on a channel of ``open_channel``/``open_aio_channel``.
        """
        return self._metadata

    def open_channel(self) -> grpc.Channel:
        """A new blocking gRPC channel to ``target``; the caller closes it."""
        channel: grpc.Channel = self._open(grpc)
        return channel

    def open_aio_channel(self) -> grpc.aio.Channel:
        """A new grpc.aio channel to ``target``; open it inside the event loop that uses
        it, and close it there."""
        channel: grpc.aio.Channel = self._open(grpc.aio)
        return channel

    def _open(self, transport: Any) -> Any:
        # ``grpc`` and ``grpc.aio`` have the same factory signatures.
        options = list({**dict(DEFAULT_CHANNEL_OPTIONS), **dict(self.channel_options)}.items())
        if self._resolved is None:
            return transport.insecure_channel(self.target, options=options)
        return transport.secure_channel(self.target, self._resolved, options=options)


def connection_options(
    target: str | ConnectionOptions,
    *,
    token: str | None,
    ca: PemSource | None,
    cert: PemSource | None,
    key: PemSource | None,
    tls: bool,
    credentials: grpc.ChannelCredentials | None,
    channel_options: Sequence[tuple[str, Any]],
) -> ConnectionOptions:
    """The options of a client's or worker's arguments: ``target`` itself when it is a
    ``ConnectionOptions`` (then no other connection argument may be given)."""
    if not isinstance(target, ConnectionOptions):
        return ConnectionOptions(
            target,
            token=token,
            ca=ca,
            cert=cert,
            key=key,
            tls=tls,
            credentials=credentials,
            channel_options=channel_options,
        )
    given = [token, ca, cert, key, credentials]
    if any(value is not None for value in given) or tls or channel_options:
        raise ArgumentError("pass the connection as ConnectionOptions or as arguments, not both")
    return target


def warn_if_token_travels_in_clear(connection: ConnectionOptions, who: str) -> bool:
    """Logs a WARNING when ``who`` (a client or worker, each calling this once, when it
    is made) will send its bearer token without TLS to another host: anyone on the path
    can read the token and use it. Returns whether it warned."""
    if connection.token is None or connection.secure or is_local_target(connection.target):
        return False
    logger.warning(
        "%s sends its bearer token to %s WITHOUT TLS: anyone on the network path can read "
        "and reuse it; pass ca= (or tls=True) and serve the coordinator with --tls-cert",
        who,
        connection.target,
    )
    return True


def is_local_target(target: str) -> bool:
    """Whether a gRPC target names this host: a Unix socket, ``localhost`` or a loopback
    address (``127.0.0.1:7233``, ``[::1]:7233``, ``dns:///localhost:7233``,
    ``ipv4:127.0.0.1:7233``). A name that merely resolves to one is not known here."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    address = target
    if address.startswith("dns:"):
        address = address[4:]
        if address.startswith("//"):  # dns://authority/host:port
            address = address[2:].partition("/")[2]
    elif address.startswith(("ipv4:", "ipv6:")):
        address = address[5:].split(",")[0]
    host = _host_of(address)
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(address: str) -> str:
    """The host of ``host:port``, ``[v6]:port``, or a bare host."""
    if address.startswith("["):
        return address[1:].partition("]")[0]
    if address.count(":") == 1:
        return address.partition(":")[0]
    return address  # a bare IPv6 address, or a host without a port


def _auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` as a bearer token (R-20)."""
    if token is None:
        return ()
    if not isinstance(token, str) or not token or any(ch in token for ch in "\r\n"):
        raise ArgumentError("token must be a non-empty str on one line")
    return (("authorization", f"Bearer {token}"),)


def _channel_credentials(options: ConnectionOptions) -> grpc.ChannelCredentials | None:
    """The credentials of a channel, or None for plaintext."""
    ca, cert, key = options.ca, options.cert, options.key
    if options.credentials is not None:
        if ca is not None or cert is not None or key is not None:
            raise ArgumentError("pass either credentials or ca/cert/key, not both")
        return options.credentials
    if (cert is None) != (key is None):
        raise ArgumentError("a client certificate needs its private key: pass both cert and key")
    if ca is None and cert is None and not options.tls:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_pem(ca, "ca") if ca is not None else None,
        private_key=_pem(key, "key") if key is not None else None,
        certificate_chain=_pem(cert, "cert") if cert is not None else None,
    )


def _pem(source: PemSource, what: str) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, str) and source.lstrip().startswith("-----BEGIN"):
        return source.encode()
    try:
        return Path(source).read_bytes()
    except OSError as error:
        raise ArgumentError(f"cannot read {what} file {os.fspath(source)!r}: {error.strerror}") from None

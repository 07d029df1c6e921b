"""TLS channel credentials from a CA, and a client certificate and key (mutual TLS).

Each of ``ca``, ``cert`` and ``key`` is a path to a PEM file, PEM text (a str starting
with ``-----BEGIN``) or PEM bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc

from worker_sdk._errors import ArgumentError

PemSource = str | os.PathLike[str] | bytes
"""A path to a PEM file, PEM text, or PEM bytes."""


def channel_credentials(
    *,
    credentials: grpc.ChannelCredentials | None = None,
    ca: PemSource | None = None,
    cert: PemSource | None = None,
    key: PemSource | None = None,
    tls: bool = False,
) -> grpc.ChannelCredentials | None:
    """The credentials of a channel, or None for plaintext.

    Args:
        credentials: Ready-made credentials; exclusive with ``ca``/``cert``/``key``.
        ca: The CA bundle that signed the coordinator's certificate; None trusts the
            system's roots.
        cert: Client certificate (chain) for mutual TLS; needs ``key``.
        key: The client certificate's private key.
        tls: Use TLS with the system's roots even when no file is given.

    Raises:
        ArgumentError: A combination is inconsistent or a file cannot be read.
    """
    if credentials is not None:
        if ca is not None or cert is not None or key is not None:
            raise ArgumentError("pass either credentials or ca/cert/key, not both")
        return credentials
    if (cert is None) != (key is None):
        raise ArgumentError("a client certificate needs its private key: pass both cert and key")
    if ca is None and cert is None and not tls:
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

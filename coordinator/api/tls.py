"""TLS certificates that renew without a restart (docs/security.md, "TLS").

cert-manager and the like replace the certificate and key files in place before the old
ones expire. ``TlsReloader`` keeps the last good copy of the files and re-reads them when
their modification time, size or inode changed:

- the API port asks it on every new TLS handshake (gRPC's dynamic server credentials),
  which costs a ``stat`` of each file;
- the HTTPS servers (dashboard, ``/metrics``) hand it their ``ssl.SSLContext``: a new
  certificate is loaded into the same context, which new connections use.

Connections already open keep the certificate they were made with. A new file that does
not load (half written, a key that does not fit the certificate) is logged once and the
old certificate stays in use; the coordinator never stops over it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int] | None, ...]
"""Each file's (mtime in ns, size, inode), None for one that cannot be read."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the server's certificate, its key and the client CA are read from."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    def paths(self) -> tuple[str, ...]:
        return (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The files' bytes, checked to load together."""

    chain: bytes
    key: bytes
    client_ca: bytes | None


def read_material(files: TlsFiles) -> TlsMaterial:
    """The files' bytes once they load as a certificate chain with its key (and a CA
    bundle). Raises OSError (ssl.SSLError among them) when they do not."""
    material = TlsMaterial(
        Path(files.cert_file).read_bytes(),
        Path(files.key_file).read_bytes(),
        Path(files.client_ca_file).read_bytes() if files.client_ca_file else None,
    )
    load_into(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), material)  # raises if unusable
    return material


def load_into(context: ssl.SSLContext, material: TlsMaterial, *, client_ca: bool = True) -> None:
    """Loads ``material`` into ``context``. ``load_cert_chain`` reads only files, so the
    bytes already read go through a private temporary directory: what is loaded is what
    was checked, whatever happens to the watched files meanwhile."""
    with _as_files(material) as (chain, key):
        context.load_cert_chain(chain, key)
    if client_ca and material.client_ca is not None:
        try:
            context.load_verify_locations(cadata=material.client_ca.decode("ascii"))
        except UnicodeDecodeError as exc:
            raise ssl.SSLError(f"the client CA file is not PEM text: {exc}") from exc


@contextmanager
def _as_files(material: TlsMaterial) -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="runwick-tls-") as directory:  # mode 0700
        chain, key = os.path.join(directory, "chain.pem"), os.path.join(directory, "key.pem")
        Path(chain).write_bytes(material.chain)
        Path(key).write_bytes(material.key)
        yield chain, key


def _stamp(files: TlsFiles) -> Stamp:
    def one(path: str) -> tuple[int, int, int] | None:
        try:
            status = os.stat(path)
        except OSError:
            return None
        return (status.st_mtime_ns, status.st_size, status.st_ino)

    return tuple(one(path) for path in files.paths())


class TlsReloader:
    """The last good TLS material of ``files``, refreshed when the files change."""

    def __init__(self, files: TlsFiles) -> None:
        """Reads the files; raises OSError when they cannot be read or do not load."""
        self.files = files
        self._stamp = _stamp(files)
        self.material = read_material(files)
        self._contexts: list[tuple[ssl.SSLContext, bool]] = []
        self._lock = threading.Lock()  # gRPC calls the fetcher from its own threads
        """What the API port was last given: the HTTPS servers' look at the files may
        have found a renewal first."""

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext for an HTTPS server holding the current material and following
        its changes; client certificates are required when there is a client CA."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_into(context, self.material)
        if self.material.client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
        self.follow(context, client_ca=True)
        return context

    def follow(self, context: ssl.SSLContext, *, client_ca: bool) -> None:
        """Loads each new certificate into ``context`` as well (and the client CA, when
        ``client_ca``: a CA is added to those the context trusts, none is removed)."""
        with self._lock:
            self._contexts.append((context, client_ca))

    def refresh(self) -> TlsMaterial | None:
        """The new material when the files changed and load; None when they did not
        change, or changed into something that does not load (logged once per change)."""
        stamp = _stamp(self.files)
        with self._lock:
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                material = read_material(self.files)
                if material == self.material:
                    return None
                for context, client_ca in self._contexts:
                    load_into(context, material, client_ca=client_ca)
            except (OSError, ValueError) as exc:
                log.warning(
                    "TLS files %s changed but do not load (%s); still serving the previous certificate",
                    ", ".join(self.files.paths()),
                    exc,
                )
                return None
            self.material = material
        log.info("TLS certificate reloaded from %s for new connections", self.files.cert_file)
        return material

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials that take the current material on each new handshake.
        With a client CA, client certificates are required (mutual TLS). Each port needs
        credentials of its own (gRPC binds one credentials object to one port), and each
        keeps its own record of what it serves."""
        served = [self.material]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            """The port's new configuration, or None to keep the one it has."""
            try:
                self.refresh()
            except Exception:  # an exception here would fail the client's handshake
                log.exception("checking the TLS files failed; still serving the previous certificate")
                return None
            with self._lock:
                if served[0] is self.material:
                    return None
                served[0] = self.material
                return _grpc_configuration(self.material)

        return grpc.dynamic_ssl_server_credentials(
            _grpc_configuration(self.material),
            fetch,  # type: ignore[arg-type]  # None means "no change" (grpc docs); the stub omits it
            require_client_authentication=self.material.client_ca is not None,
        )

    async def watch(self, interval_s: float) -> None:
        """Refreshes every ``interval_s``, for the HTTPS servers, which have no hook on
        their handshakes. Runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.refresh)


def _grpc_configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(material.key, material.chain)], material.client_ca)

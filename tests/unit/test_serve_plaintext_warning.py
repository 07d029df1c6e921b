"""``runwick serve`` warns when it listens beyond this host without TLS
(``coordinator.cli.serve.plaintext_warning``)."""

from __future__ import annotations

import pytest

from coordinator.cli.serve import plaintext_warning
from coordinator.config import CoordinatorConfig


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "runwick.internal"])
def test_a_non_loopback_host_without_tls_is_warned_of(host: str) -> None:
    warning = plaintext_warning(CoordinatorConfig(host=host))
    assert warning is not None
    assert warning.startswith(f"PLAINTEXT on {host}: without TLS, bearer tokens")
    assert "--tls-cert and --tls-key" in warning


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_is_quiet(host: str) -> None:
    assert plaintext_warning(CoordinatorConfig(host=host)) is None


def test_tls_is_quiet() -> None:
    config = CoordinatorConfig(host="0.0.0.0", tls_cert_file="server.pem", tls_key_file="server-key.pem")
    assert plaintext_warning(config) is None

"""What the Python SDK's Hello says of the worker beside its ID: the host and the SDK's
version, each within the bounds the coordinator takes (Hello.host, Hello.sdk)."""

from __future__ import annotations

import socket

import pytest

from worker_sdk import _identity


def test_the_sdk_names_itself_and_its_version() -> None:
    name, _, version = _identity.sdk().partition("/")
    assert name == "runwick-python" and version
    assert len(_identity.sdk()) <= 128


def test_the_host_is_the_host_name_printable_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _identity.host() == socket.gethostname()
    monkeypatch.setattr(socket, "gethostname", lambda: "pod-\x07" + "x" * 400)
    host = _identity.host()
    assert host.isprintable() and host.startswith("pod-x") and len(host) == _identity.MAX_HOST_CHARS

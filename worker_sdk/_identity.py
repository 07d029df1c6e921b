"""What a worker says of itself in its Hello, beside its ID: the host it runs on and the
SDK's version (the coordinator's dashboard shows both)."""

from __future__ import annotations

import functools
import socket
from importlib.metadata import PackageNotFoundError, version

MAX_HOST_CHARS = 256
"""The coordinator takes at most this many characters of host (Hello.host)."""
SDK_NAME = "runwick-python"


@functools.cache
def sdk() -> str:
    """``runwick-python/<version of the installed runwick distribution>``."""
    try:
        installed = version("runwick")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        installed = "0+unknown"
    return f"{SDK_NAME}/{installed}"


def host() -> str:
    """This machine's host name (a pod's name on Kubernetes), printable and bounded."""
    name = "".join(c for c in socket.gethostname() if c.isprintable())
    return name[:MAX_HOST_CHARS]

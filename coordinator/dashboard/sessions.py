"""Dashboard cookies and CSRF tokens.

A signed-in browser holds a session ID (random, opaque; ``Coordinator.
open_dashboard_session``), never the API token: the database keeps the ID's hash and
its token, so every replica knows the session and a sign-out or the token's revocation
ends it. The cookie is ``HttpOnly`` and ``SameSite=Strict``. Under TLS it is named
``__Host-runwick_session`` and is ``Secure`` with ``Path=/`` and no ``Domain``, so
browsers accept it only from this origin over HTTPS and let no other host or path set
or shadow it. Over plain HTTP (loopback, or behind a proxy that terminates TLS)
browsers refuse ``__Host-`` and ``Secure`` cookies from an ``http://`` page, so it is
plain ``runwick_session`` there.

Every form that changes something carries a CSRF token: an HMAC of a fixed label keyed
with the session ID, which only the session's own pages can show (the synchronizer-token
pattern, with no state of its own). The sign-in form, which has no session yet, carries
a random value that must match a short-lived cookie (double submit). With
authentication off, a per-process key stands in for the session ID.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

CSRF_FIELD = "csrf"


@dataclass(frozen=True, slots=True)
class CookieNames:
    """The dashboard's cookies, named and scoped for TLS or plain HTTP."""

    session: str
    signin: str
    signin_path: str
    secure: bool

    @classmethod
    def for_tls(cls, tls: bool) -> CookieNames:
        if tls:
            # __Host- cookies must be Secure, Path=/ and carry no Domain: browsers hold
            # this origin's own, which no subdomain or plain-HTTP page can overwrite.
            return cls("__Host-runwick_session", "__Host-runwick_signin", "/", True)
        return cls("runwick_session", "runwick_signin", "/signin", False)


def csrf_token(session_id: str) -> str:
    """The CSRF token of the forms of the session ``session_id``."""
    return _mac(session_id.encode(), "csrf")


def anonymous_csrf_token(process_key: bytes) -> str:
    """With authentication off there is no session: forms carry this instead."""
    return _mac(process_key, "csrf:anonymous")


def new_signin_nonce() -> str:
    return secrets.token_urlsafe(24)


def same(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a submitted token with the expected one."""
    return bool(given) and hmac.compare_digest(str(given).encode(), expected.encode())


def _mac(key: bytes, message: str) -> str:
    digest = hmac.new(key, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

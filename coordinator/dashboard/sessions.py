"""Dashboard sign-in sessions and CSRF tokens, kept in the browser and checked on every
request, so any replica answers any request and nothing is stored server-side.

The session cookie holds the API token the operator signed in with and when it was
issued, bound together by an HMAC keyed with the token: without the token nobody can
mint or stretch a session, and every request authenticates the token again through the
facade (as the gRPC API does), so a revoked token's sessions end. The cookie is
``HttpOnly`` and ``SameSite=Strict`` (and ``Secure`` under TLS): scripts cannot read it
and other sites' pages do not send it.

Every form that changes something carries a CSRF token derived from the session the
same way (the synchronizer-token pattern without server state); the sign-in form, which
has no session yet, carries a random value that must match a short-lived cookie
(double submit). With authentication off, a per-process key stands in for the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "runwick_session"
SIGNIN_COOKIE = "runwick_signin"
CSRF_FIELD = "csrf"
_VERSION = "v1"
MAX_COOKIE_CHARS = 1_024


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    issued_at_ms: int

    def csrf_token(self) -> str:
        """The CSRF token of this session's forms."""
        return _mac(self.token.encode(), f"csrf:{self.issued_at_ms}")

    def cookie_value(self) -> str:
        mac = _mac(self.token.encode(), f"session:{self.issued_at_ms}")
        return f"{_VERSION}.{self.issued_at_ms}.{mac}.{self.token}"


def read_session(value: str | None, now_ms: int, ttl_ms: int) -> Session | None:
    """The session a cookie holds, or None when it is missing, malformed, forged or
    expired (issued more than ``ttl_ms`` ago, or in the future)."""
    if not value or len(value) > MAX_COOKIE_CHARS:
        return None
    parts = value.split(".", 3)
    if len(parts) != 4 or parts[0] != _VERSION or not parts[1].isdigit() or not parts[3]:
        return None
    issued_at_ms, mac, token = int(parts[1]), parts[2], parts[3]
    if not hmac.compare_digest(mac, _mac(token.encode(), f"session:{issued_at_ms}")):
        return None
    if not now_ms - ttl_ms <= issued_at_ms <= now_ms + 60_000:  # a minute of clock skew between replicas
        return None
    return Session(token, issued_at_ms)


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

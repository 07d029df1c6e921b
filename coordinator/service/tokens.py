"""API tokens (R-20): creation, listing, revocation, bootstrap, and authentication.

A token reads ``rwk_<id>_<secret>``: ``id`` is 16 hex characters, public (listed, named
in audit events, used to revoke), and ``secret`` is ``secrets.token_urlsafe(32)``, 256
random bits. The store keeps only the SHA-256 of the whole token. A fast hash is the
right one here: with 256 bits of entropy nothing can be guessed, so the slow, salted
hashes built for human passwords add cost on every call and no safety. Checks look the
token up by its ID and compare hashes with ``hmac.compare_digest`` (constant time).

Authentication answers from a small cache (``auth_cache_ttl_s``), so most calls cost no
database read; a revocation on this replica evicts the token at once, other replicas
notice within the cache's lifetime.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.config import ConfigError
from coordinator.domain.access import (
    ALL_SCOPES,
    SYSTEM_ACTOR,
    Actor,
    Principal,
    Scope,
    ScopeError,
    format_scopes,
    parse_scopes,
)
from coordinator.domain.clock import Clock
from coordinator.domain.records import TokenRecord
from coordinator.errors import FailedPrecondition, InvalidArgument, NotFound
from coordinator.service import audit
from coordinator.store import Store, Tx
from coordinator.validation import MAX_TOKEN_QUEUES, MAX_TOKEN_SCOPES, check_name, too_many_items

log = logging.getLogger(__name__)

TOKEN_PREFIX = "rwk"
BOOTSTRAP_TOKEN_NAME = "bootstrap-admin"
MAX_TOKEN_NAME_LENGTH = 128
_TOKEN = re.compile(r"^rwk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_ID = re.compile(r"^[0-9a-f]{16}$")

__all__ = [
    "BOOTSTRAP_TOKEN_NAME",
    "NewToken",
    "TokenService",
    "check_bootstrap_token",
    "hash_token",
    "new_token",
    "parse_token",
]


def new_token() -> tuple[str, str]:
    """A fresh ``(token_id, token)`` pair."""
    token_id = secrets.token_hex(8)
    return token_id, f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"


def check_bootstrap_token(token: str) -> str:
    """The ID of an operator-supplied bootstrap token; raises ConfigError, without
    echoing the secret, when it is not in the token format."""
    token_id = parse_token(token)
    if token_id is None:
        raise ConfigError(
            "the supplied bootstrap token is not a Runwick token: it must read "
            "rwk_<16 hex characters>_<43 characters of A-Z a-z 0-9 - _>"
        )
    return token_id


def parse_token(token: str) -> str | None:
    """The token's ID, or None when it is not in the token format."""
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def hash_token(token: str) -> str:
    """What the store keeps: the SHA-256 of the token, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class NewToken:
    record: TokenRecord
    token: str
    """The bearer token; returned once, never stored."""


@dataclass(slots=True)
class _Cached:
    record: TokenRecord | None
    fetched_at: float


class TokenService:
    def __init__(self, store: Store, clock: Clock, cache_ttl_s: float = 5.0) -> None:
        self.store = store
        self.clock = clock
        self.cache_ttl_s = cache_ttl_s
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    # -- authentication -----------------------------------------------------------------

    def cached_principal(self, token: str) -> tuple[bool, Principal | None]:
        """``(True, principal or None)`` when the cache can answer, else ``(False, None)``:
        then call ``authenticate`` off the event loop."""
        token_id = parse_token(token)
        if token_id is None:
            return True, None
        with self._lock:
            entry = self._cache.get(token_id)
        if entry is None or time.monotonic() - entry.fetched_at > self.cache_ttl_s:
            return False, None
        return True, _principal(entry.record, token)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None for anything else.

        Raises Unavailable (a StoreError) when the database cannot be read.
        """
        token_id = parse_token(token)
        if token_id is None:
            return None
        record = self.store.get_token(token_id)
        with self._lock:
            if len(self._cache) > 10_000:  # unknown IDs must not grow it without bound
                self._cache.clear()
            self._cache[token_id] = _Cached(record, time.monotonic())
        return _principal(record, token)

    # -- management ---------------------------------------------------------------------

    def bootstrap(self, supplied: str | None = None, *, generate: bool = True) -> str | None:
        """On first start (no tokens at all), makes the first admin token, with every
        scope: ``supplied`` (the operator's, checked by ``check_bootstrap_token``) or, with
        ``generate``, a random one. Returns the token when it made one; None when tokens
        exist already or it made none. Safe with replicas starting together."""

        def bootstrap(tx: Tx) -> NewToken | None:
            tx.lock_tokens()
            if tx.has_tokens() or (supplied is None and not generate):
                return None
            return self._insert(tx, BOOTSTRAP_TOKEN_NAME, ALL_SCOPES, None, SYSTEM_ACTOR, supplied)

        if supplied is None and not generate:
            if not self.store.transact(lambda tx: tx.has_tokens(), what="the token bootstrap"):
                log.warning(
                    "no token exists and none was made: every call is refused until a start that can "
                    "hand the bootstrap admin token over (a terminal, --admin-token-file, or "
                    "RUNWICK_BOOTSTRAP_TOKEN(_FILE))"
                )
            return None
        created = self.store.transact(bootstrap, what="the token bootstrap")
        if created is None:
            if supplied is not None:
                log.info("tokens exist: the supplied bootstrap token is not used")
            return None
        how = "installed the supplied" if supplied is not None else "created the"
        log.info("%s bootstrap admin token %s", how, created.record.id)
        return created.token

    def create(self, name: str, scopes: Iterable[str], queues: Iterable[str], actor: Actor) -> NewToken:
        """Creates a token (audited); raises InvalidArgument for a bad name, scope or queue."""
        name = _check_token_name(name)
        scopes, queues = list(scopes), list(queues)
        if len(scopes) > MAX_TOKEN_SCOPES:
            raise too_many_items("scopes", MAX_TOKEN_SCOPES, "scope names", len(scopes))
        if len(queues) > MAX_TOKEN_QUEUES:
            raise too_many_items("queues", MAX_TOKEN_QUEUES, "queues", len(queues))
        try:
            granted = parse_scopes(scopes)
        except ScopeError as exc:
            raise InvalidArgument("scopes", str(exc)) from exc
        queue_set = frozenset(queues)
        for queue in queue_set:
            check_name("queues", queue)
        if queue_set and not granted & {Scope.WORK, Scope.ENQUEUE}:
            raise InvalidArgument(
                "queues", "a queue restriction applies to tokens with the work or enqueue scope only"
            )
        return self.store.transact(
            lambda tx: self._insert(tx, name, granted, queue_set or None, actor), what="a token creation"
        )

    def list(self, *, include_revoked: bool) -> list[TokenRecord]:
        return self.store.list_tokens(include_revoked=include_revoked)

    def revoke(self, token_id: str, actor: Actor) -> TokenRecord:
        """Revokes a token (audited); it stops working on this replica at once."""
        if not _ID.match(token_id):
            raise InvalidArgument("id", f"{token_id[:64]!r} is not a token ID (16 hex characters)")

        def revoke(tx: Tx) -> TokenRecord | None:
            record = tx.get_token(token_id)
            if record is None:
                raise NotFound(f"token {token_id} does not exist")
            if record.revoked:
                raise FailedPrecondition(f"token {token_id} ({record.name}) is already revoked")
            now = self.clock.now_ms()
            tx.revoke_token(token_id, now)
            tx.insert_audit_event(
                audit.event(actor, audit.TOKEN_REVOKE, token_id, now, f"name={record.name}")
            )
            return tx.get_token(token_id)

        revoked = self.store.transact(revoke, what="a token revocation")
        self.forget(token_id)
        assert revoked is not None
        return revoked

    def forget(self, token_id: str) -> None:
        """Drops the token from the cache: its next use reads the store again."""
        with self._lock:
            self._cache.pop(token_id, None)

    def _insert(
        self,
        tx: Tx,
        name: str,
        scopes: frozenset[Scope],
        queues: frozenset[str] | None,
        actor: Actor,
        supplied: str | None = None,
    ) -> NewToken:
        if supplied is None:
            token_id, token = new_token()
        else:
            token_id, token = check_bootstrap_token(supplied), supplied
        now = self.clock.now_ms()
        record = TokenRecord(
            id=token_id,
            name=name,
            secret_sha256=hash_token(token),
            scopes=scopes,
            queues=queues,
            created_at_ms=now,
            created_by=actor.principal.token_id,
            revoked_at_ms=None,
        )
        tx.insert_token(record)
        detail = f"name={name} scopes={format_scopes(scopes)}"
        if queues:
            detail += f" queues={','.join(sorted(queues))}"
        tx.insert_audit_event(audit.event(actor, audit.TOKEN_CREATE, token_id, now, detail))
        return NewToken(record, token)


def _principal(record: TokenRecord | None, token: str) -> Principal | None:
    if record is None or record.revoked:
        return None
    if not hmac.compare_digest(record.secret_sha256, hash_token(token)):
        return None
    return Principal(token_id=record.id, name=record.name, scopes=record.scopes, queues=record.queues)


def _check_token_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= MAX_TOKEN_NAME_LENGTH:
        raise InvalidArgument("name", f"must be 1 to {MAX_TOKEN_NAME_LENGTH} characters")
    if any(not ch.isprintable() for ch in name):
        raise InvalidArgument("name", "must not contain control characters")
    return name

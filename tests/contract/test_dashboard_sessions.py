"""Dashboard sessions in the store, on both engines: the browser's session ID is never
stored (its hash is), a session names its token's principal until sign-out, expiry or
the token's revocation, one token's sessions are bounded, expired rows are cleared, and
a session opened through one replica's store is seen and ended through another's."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import text

from coordinator.config import DashboardLimits
from coordinator.domain.access import SYSTEM_ACTOR, Principal
from coordinator.domain.clock import FakeClock
from coordinator.service.dashboard import DashboardSessions
from coordinator.service.tokens import TokenService
from coordinator.store import Store

TTL_S = 3_600.0


def _sessions(store: Store, clock: FakeClock, **limits: int) -> DashboardSessions:
    return DashboardSessions(store, clock, TTL_S, replace(DashboardLimits(), **limits))


def _principal(store: Store, clock: FakeClock, name: str = "operator") -> tuple[TokenService, Principal]:
    tokens = TokenService(store, clock)
    created = tokens.create(name, ["read", "manage"], [], SYSTEM_ACTOR)
    principal = tokens.authenticate(created.token)
    assert principal is not None
    return tokens, principal


def _rows(store: Store) -> list[tuple[object, ...]]:
    with store._write_engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text("SELECT * FROM dashboard_sessions"))]


def test_a_session_names_its_tokens_principal_and_only_its_hash_is_stored(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    sessions = _sessions(store, clock)

    session_id = sessions.open(principal)

    assert len(session_id) == 43
    assert sessions.principal(session_id) == principal
    cells = [str(cell) for row in _rows(store) for cell in row]
    assert session_id not in cells and principal.token_id in cells


def test_sign_out_ends_the_session(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    sessions = _sessions(store, clock)
    kept, ended = sessions.open(principal), sessions.open(principal)

    assert sessions.close(ended) is True

    assert sessions.principal(ended) is None
    assert sessions.close(ended) is False
    assert sessions.principal(kept) == principal  # the token's other sessions go on


def test_a_session_ends_at_its_expiry(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    sessions = _sessions(store, clock)
    session_id = sessions.open(principal)

    clock.advance(int(TTL_S * 1000) - 1)
    assert sessions.principal(session_id) == principal
    clock.advance(1)
    assert sessions.principal(session_id) is None


def test_revoking_the_token_ends_its_sessions(store: Store) -> None:
    clock = FakeClock()
    tokens, principal = _principal(store, clock)
    _, other = _principal(store, clock, "other")
    sessions = _sessions(store, clock)
    revoked, kept = sessions.open(principal), sessions.open(other)
    assert principal.token_id is not None

    tokens.revoke(principal.token_id, SYSTEM_ACTOR)

    assert sessions.principal(revoked) is None
    assert sessions.principal(kept) == other


def test_ids_that_are_not_session_ids_are_refused(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    sessions = _sessions(store, clock)
    session_id = sessions.open(principal)

    for forged in ("", session_id[:-1], session_id + "A", "x" * 10_000, "' OR 1=1 --" + "a" * 32):
        assert sessions.principal(forged) is None
        assert sessions.close(forged) is False
    assert sessions.principal(session_id) == principal


def test_one_token_keeps_at_most_its_newest_sessions(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    sessions = _sessions(store, clock, max_sessions_per_token=3)

    opened = []
    for _ in range(5):
        opened.append(sessions.open(principal))
        clock.advance(1)

    assert [sessions.principal(s) is not None for s in opened] == [False, False, True, True, True]
    assert len(_rows(store)) == 3


def test_a_sign_in_clears_expired_sessions(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    _, other = _principal(store, clock, "other")
    sessions = _sessions(store, clock)
    for _ in range(3):
        sessions.open(principal)
    clock.advance(int(TTL_S * 1000))

    sessions.open(other)

    assert [row[1] for row in _rows(store)] == [other.token_id]


def test_a_session_opened_on_one_replica_is_seen_and_ended_on_another(store: Store) -> None:
    clock = FakeClock()
    _, principal = _principal(store, clock)
    other_replica = Store.open(store.url)
    try:
        here, there = _sessions(store, clock), _sessions(other_replica, clock)
        session_id = here.open(principal)

        assert there.principal(session_id) == principal
        assert there.close(session_id) is True
        assert here.principal(session_id) is None
    finally:
        other_replica.close()

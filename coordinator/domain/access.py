"""Who may do what (R-20, R-21): scopes, the principal a token stands for, and the rules
that are not a plain scope check (a worker token restricted to queues).

Each scope grants exactly its own RPCs; none implies another. Which RPC needs which
scope is the table in ``coordinator.api.auth``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    ENQUEUE = "enqueue"
    """Enqueue jobs."""
    READ = "read"
    """Read jobs and attempts (code and exception type only, R-22), and list schedules."""
    MANAGE = "manage"
    """Cancel and retry jobs, and create, pause, resume and delete schedules (R-18)."""
    REVEAL = "reveal"
    """Read an attempt's exception message and full text; every use is audited."""
    WORK = "work"
    """The worker protocol (WorkerService.Connect), nothing else: no job reads."""
    ADMIN = "admin"
    """Tokens and the audit log."""


ALL_SCOPES = frozenset(Scope)


class ScopeError(ValueError):
    """A scope name or a queue restriction is not valid."""


def parse_scopes(names: Iterable[str]) -> frozenset[Scope]:
    """The scopes named (case-insensitive, blanks ignored); at least one is required."""
    scopes: set[Scope] = set()
    for name in names:
        cleaned = name.strip().lower()
        if not cleaned:
            continue
        try:
            scopes.add(Scope(cleaned))
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise ScopeError(f"unknown scope {name!r}; known scopes: {known}") from None
    if not scopes:
        raise ScopeError("a token needs at least one scope")
    return frozenset(scopes)


def format_scopes(scopes: Iterable[Scope]) -> str:
    """Scopes in table order, comma-separated (how they are stored)."""
    chosen = set(scopes)
    return ",".join(s.value for s in Scope if s in chosen)


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller an RPC runs for: a token's identity and grants."""

    token_id: str | None
    """None when authentication is off (``--insecure``) or for the coordinator itself."""
    name: str
    scopes: frozenset[Scope]
    queues: frozenset[str] | None = None
    """The only queues this token acts in, None meaning any: for ``work`` the queues a
    worker may take jobs from, for ``enqueue`` those it may enqueue into and name
    parents in (the queue is the tenancy boundary)."""

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes

    def may_work(self, queues: Iterable[str]) -> bool:
        """A worker token restricted to queues may subscribe to those queues only."""
        return self.queues is None or set(queues) <= self.queues


def may_serve(token_queues: Collection[str] | None, queue: str | None) -> bool:
    """Whether a worker whose token is restricted to ``token_queues`` (None: any queue)
    may receive what a job of ``queue`` produced (a parent's output, R-16). Queues are
    the tenancy boundary; a queue not known (None) is open to unrestricted tokens only."""
    return token_queues is None or (queue is not None and queue in token_queues)


ANONYMOUS = Principal(token_id=None, name="anonymous", scopes=ALL_SCOPES)
"""Who calls when authentication is off: everything is allowed, and audited as such."""
COORDINATOR = Principal(token_id=None, name="coordinator", scopes=ALL_SCOPES)
"""The coordinator acting on its own (the bootstrap admin token)."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked for an audited change, and from where (R-22)."""

    principal: Principal
    peer: str
    """The caller's address as the transport reports it (``ipv4:10.0.0.7:51234``)."""


SYSTEM_ACTOR = Actor(COORDINATOR, peer="local")

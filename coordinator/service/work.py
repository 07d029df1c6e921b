"""The worker protocol's values as the service sees them: what arrived in one batch
window (``WorkBatch``) and the answers to each message (``BatchAnswers``). The
transport decodes messages into these and frames the answers; the dispatcher routes
them.

The values made once per job on the hot path (results, starts, releases and their
answers) are named tuples: a frozen dataclass's ``__init__`` stores each field through
its guard, several times a tuple's cost, and each job makes a few of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol

from coordinator.domain.access import Actor
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import Enqueued, JobRecord, NewJobSpec, WorkerIdentity
from coordinator.domain.states import JobState
from coordinator.errors import CoordinatorError
from coordinator.service.effects import Effects

if TYPE_CHECKING:
    from coordinator.service.manage import Managed


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    count: int
    lease_ms: int
    token_id: str | None = None
    """The token of the stream claiming: recorded on each attempt, which only streams of
    this worker with this token may then act on."""
    token_queues: frozenset[str] | None = None
    """That token's queue restriction (None: any queue): a parent's output in another
    queue is withheld from the claim (docs/security.md)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    job: JobRecord
    attempt_id: str
    lease_expires_at_ms: int
    parent_outputs: Mapping[str, bytes] = field(default_factory=dict)
    """The outputs of the job's parents, by parent ID (R-16), without those of parents in
    queues the claiming token may not serve."""
    parent_trace_contexts: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    """The ``(traceparent, tracestate)`` of those parents enqueued with a trace context."""


class ResultReport(NamedTuple):
    attempt_id: str
    report: Report
    output: bytes | None = None
    sender: WorkerIdentity | None = None
    """The stream it came on; a result without one is refused."""


class AttemptMessage(NamedTuple):
    """A start or a release of an attempt, and the stream it came on."""

    attempt_id: str
    sender: WorkerIdentity


NO_PROGRESS: Mapping[str, str] = MappingProxyType({})
"""A heartbeat without progress reports (most of them)."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """One heartbeat: the attempts a stream still runs, and the lease it asks for."""

    attempt_ids: Sequence[str]
    """As the worker sent them (a protobuf repeated field until the dispatcher screens
    them: a heartbeat merged away is never copied)."""
    lease_ms: int
    sender: WorkerIdentity
    progress: Mapping[str, str] = field(default_factory=lambda: NO_PROGRESS)
    """The latest progress reports (stored form) by attempt ID: stored for the
    attempts the heartbeat renews, in the same transaction (``domain.progress``)."""


class StartAnswer(NamedTuple):
    attempt_id: str
    granted: bool
    execution_number: int = 0
    reason: str = ""


class ResultAnswer(NamedTuple):
    attempt_id: str
    accepted: bool
    job_state: JobState | None = None
    retry_delay_ms: int | None = None
    reason: str = ""
    error: CoordinatorError | None = None
    """Set when the result itself was refused (unknown attempt, output over
    ``max_output_bytes``, invalid field): nothing was written, and resending the same
    result cannot succeed. Without it, a refused result is stale (R-11)."""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    lost: set[str]
    """The attempts no longer recognised (R-10)."""
    lease_expires_at_ms: int
    cancels: frozenset[str] = frozenset()
    """The attempts whose job a user cancelled (R-8): repeated until the run ends."""


@dataclass(frozen=True, slots=True)
class EnqueueItem:
    """One Enqueue call waiting for the writer: all of its jobs or none (``JobsService``)."""

    specs: Sequence[NewJobSpec]
    reachable: frozenset[str] | None = None
    """The caller's queue restriction (None: any queue)."""


EnqueueOutcome = list[Enqueued] | Exception
"""What became of one enqueue item: its jobs, or why it failed (nothing of it written)."""


@dataclass(frozen=True, slots=True)
class CancelItem:
    """One single-job cancel waiting for the writer (R-8; ``service.cancel_items``)."""

    job_id: str
    """In its stored form (checked before it was queued)."""
    actor: Actor
    """Who cancels, for the audit event."""


class StartJoin(Protocol):
    """An enqueue's claims handed out before the commit, and the starts that join its
    transaction (``dispatch.joined_starts``)."""

    def hand_out(self, claims: Sequence[Sequence[Claimed]]) -> bool:
        """Sends the claims now; False when they go after the commit instead."""
        ...

    def gather(self) -> list[AttemptMessage]:
        """The starts that came for them, after a short wait."""
        ...


@dataclass(slots=True)
class WorkBatch:
    """What arrived from all streams in one batch window."""

    releases: list[AttemptMessage] = field(default_factory=list)
    starts: list[AttemptMessage] = field(default_factory=list)
    heartbeats: list[HeartbeatRequest] = field(default_factory=list)
    results: list[ResultReport] = field(default_factory=list)
    claims: list[ClaimRequest] = field(default_factory=list)
    enqueues: list[EnqueueItem] = field(default_factory=list)
    """Enqueue calls, each written under its own savepoint (``service.enqueue_items``)."""
    cancels: list[CancelItem] = field(default_factory=list)
    """Single-job cancels, each under its own savepoint (``service.cancel_items``)."""
    joining: StartJoin | None = None
    """Set when the claims go out before the commit and their starts may join the
    transaction (a light load's enqueue, ``Dispatcher``)."""

    def __bool__(self) -> bool:
        return bool(
            self.releases
            or self.starts
            or self.heartbeats
            or self.results
            or self.claims
            or self.enqueues
            or self.cancels
        )


@dataclass(slots=True)
class BatchAnswers(Effects):
    """The answers to one batch, in the order of its messages, and its effects."""

    starts: list[StartAnswer] = field(default_factory=list)
    heartbeats: list[HeartbeatAnswer] = field(default_factory=list)
    results: list[ResultAnswer] = field(default_factory=list)
    claims: list[list[Claimed]] = field(default_factory=list)
    drained: list[bool] = field(default_factory=list)
    """For each claim, whether it found its queues empty of its wire names: fewer jobs
    than it could take, none held back by a paused queue or a concurrency limit. Its
    worker needs no claim again until work is heard of (``Dispatcher``)."""
    enqueued: list[EnqueueOutcome] = field(default_factory=list)
    """For each enqueue item, its jobs or its error; valid once the batch committed."""
    cancelled: list[Managed | Exception] = field(default_factory=list)
    """For each cancel item, the job after it (with its effects, for the caller to hand
    on) or why it was refused; valid once the batch committed."""
    joined_starts: list[StartAnswer] = field(default_factory=list)
    """For each start that joined the transaction (``WorkBatch.joining``), its answer."""
    handed_out_early: bool = False
    """Whether ``claims`` went to their workers before the commit (on this try)."""

    @property
    def lost(self) -> list[set[str]]:
        return [answer.lost for answer in self.heartbeats]

    @property
    def lease_expires_at_ms(self) -> list[int]:
        return [answer.lease_expires_at_ms for answer in self.heartbeats]

    @property
    def cancels(self) -> list[frozenset[str]]:
        return [answer.cancels for answer in self.heartbeats]

    def stale_result_count(self) -> int:
        """Results refused as stale (R-11); refused results carry an error instead."""
        return sum(1 for result in self.results if not result.accepted and result.error is None)

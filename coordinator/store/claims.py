"""Claims (R-17): which jobs a claim takes, decided here and nowhere else.

``Tx.claim`` takes what each worker asks for (``ClaimWanted``: its queues, its wire names,
how many jobs) and answers each with the jobs it is to claim and whether its queues are
drained (``ClaimFound``). One call is a small pipeline, and a later rule of which job
runs next (a limit per key, a rate, fair turns between keys) is one more step of it:

1. **eligible queues**: the queues' controls are read once per call. A paused queue
   hands out nothing; a queue with a concurrency limit is locked (PostgreSQL, so claims
   of it are serialised across replicas) and hands out at most its room, its limit less
   its reserved and running jobs, counted once and then counted down as jobs go.
2. **queues with work**: a call that names more than one queue first asks, in one
   statement, which of them hold a claimable job at all, and reads only those; a worker
   naming a hundred queues and a thousand wire names costs a read per queue that holds
   work, not one per queue named.
3. **ordered candidates**: each queue's claimable jobs of the wire names asked for, in
   claim order (priority desc, run-at, id), an ordered walk of ``ix_jobs_claim`` that
   stops at its limit (locked, and skipped by other replicas: ``FOR UPDATE SKIP LOCKED``),
   merged across queues. A queue with a per-key limit is read past the keys at their
   limit (``store.claim_keys``), and a queue whose jobs carry keys takes its keys in
   turn (``store.claim_turns``).
4. **per-key limits**: of the candidates, a per-key limited queue's jobs are kept while
   their key has room (``KeyRoom.admit``).
5. **rates**: then the jobs of a rated queue are admitted while its window (or each
   key's, by ``concurrency_key``) has room: its starts in the window and its reserved
   jobs are fewer than its count (``store.claim_rates``, ``domain.rates``); the jobs
   handed out count as reserved. A claim held back by a rate tells its dispatcher when
   to try again (``wake_at_ms``). Limits come before the rate, so a job a limit refuses
   never uses up the rate's room (the order ``domain.flow.CONTROL_ORDER`` states, which
   ``waiting_reason`` and the held-back counts follow too).

On PostgreSQL a call for a single queue reads the queue's controls with its jobs in one
statement (a claim at a light load then goes out after one read instead of two).

What is claimable is one rule, ``domain.states.is_claimable``; the SQL text of it
(``CLAIMABLE_PREDICATE``, the predicate of the partial indexes) is generated from the
same states in ``store.schema``, and tests/contract/test_claimable_rule.py checks every copy.

The caller writes the claims (``JobWrites.claim``: the reservation and the attempt row).
Until it does, the jobs it was handed stay claimable in the database, so a call remembers
what it handed out: no job goes to two requests, and a request reads past those.

Every read sees the transaction's own writes (held writes go out before it, PostgreSQL,
``store.pg_held``): an enqueue that claims reads its new jobs from the database, as any
other claim does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.domain import rates
from coordinator.domain.records import JobRecord, QueueRecord
from coordinator.store.claim_keys import MAX_KEY_ROUNDS, ClaimKeyOps, KeyRoom
from coordinator.store.claim_rates import RateOps, key_of, rate_of
from coordinator.store.claim_reads import (
    CLAIMABLE_IN_QUEUE,
    CONTROLS_AND_CLAIMABLE,
    CONTROLS_AND_CLAIMABLE_JOB_ID_AT,
    claimable_past,
    queues_with_work,
)
from coordinator.store.claim_turns import ClaimTurnOps
from coordinator.store.prepared import DriverRows
from coordinator.store.rows import jobs_from

_NO_LIMIT = 2**31
"""The room of a queue without a concurrency limit (a per-key limit or a rate decides)."""


@dataclass(frozen=True, slots=True)
class ClaimWanted:
    """What one worker's claim asks for."""

    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    count: int
    """How many jobs it has room for; clamped to ``StoreBounds`` (docs/limits.md)."""


@dataclass(frozen=True, slots=True)
class ClaimFound:
    """The jobs one claim is to take: its free queues' jobs in claim order, then those
    of its limited queues, queue by queue."""

    jobs: list[JobRecord]
    drained: bool
    """Its queues hold no more claimable jobs of its wire names for it: none of them is
    paused or limited, and it got fewer jobs than it asked for."""
    wake_at_ms: int | None = None
    """A rate held jobs back: when its window may have room again."""


@dataclass(slots=True)
class _Call:
    """What one ``Tx.claim`` call has decided so far."""

    now_ms: int
    named: tuple[str, ...]
    """Every queue the call's requests name."""
    controls: dict[str, QueueRecord] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    """Limited queues: how many more of their jobs this call may hand out."""
    with_work: frozenset[str] | None = None
    """The queues that held a claimable job when first asked (None: not asked yet)."""
    prefetched: dict[str, list[JobRecord]] = field(default_factory=dict)
    """A queue's jobs read with its controls (PostgreSQL), for the call's first request."""
    taken: set[str] = field(default_factory=set)
    """The jobs handed out so far (the caller writes their claims after the call)."""
    taken_from: dict[str, list[str]] = field(default_factory=dict)
    """The same, by queue."""
    exhausted: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    """Per queue, the sets of wire names a read found nothing more of: later requests of
    the call that ask for no other name skip the queue (at a light load every session
    with credit claims in the same transaction, and the first takes all there is)."""
    key_rooms: dict[str, KeyRoom] = field(default_factory=dict)
    """Queues with a per-key limit or rate: their keys' room (``store.claim_keys``)."""
    rate_used: dict[str, dict[str, int]] = field(default_factory=dict)
    """Rated queues: per key, starts in the window and reserved jobs, read once and
    counted up as jobs go."""
    wake_at_ms: int | None = None
    """A rate held jobs back: the start of its next slot, when it may have room."""
    rate_held: set[str] = field(default_factory=set)
    """Queues whose rate held jobs back."""
    keyed_plans: bool = False
    """The transaction plans a keyed claim's reads (``ClaimKeyOps.plan_keyed_reads``)."""


class ClaimOps(ClaimKeyOps, ClaimTurnOps, RateOps):
    def claim(self, wanted: Sequence[ClaimWanted], now_ms: int) -> list[ClaimFound]:
        """The jobs to claim for each of ``wanted``, earlier requests served first, no
        job twice. Every job found is the caller's: it must claim each of them in this
        transaction (they stay locked, on PostgreSQL, until it ends)."""
        asking = [w for w in wanted if self._limit(w) > 0 and w.wire_names]
        call = _Call(now_ms, tuple(sorted({queue for w in asking for queue in w.queues})))
        if self._postgres and len(call.named) == 1:
            self._read_controls_with_jobs(call, call.named[0], asking[0])
        else:
            call.controls = self.queue_controls(call.named)
        for name in call.named:  # read afresh: what starts of their jobs must count
            controls = call.controls.get(name)
            self.rates_seen[name] = controls is not None and controls.rate_count is not None
        return [self._claim_one(call, w) for w in wanted]

    def _limit(self, wanted: ClaimWanted) -> int:
        return self.bounds.clamp_claim_batch(wanted.count)  # docs/limits.md: clamp silently

    def _claim_one(self, call: _Call, wanted: ClaimWanted) -> ClaimFound:
        limit = self._limit(wanted)
        if limit <= 0 or not wanted.wire_names:
            return ClaimFound([], False)
        free, limited = self._eligible(call, wanted.queues)
        names = frozenset(wanted.wire_names)
        found = self._candidates(call, free, wanted.wire_names, names, limit) if free else []
        for queue, room in limited.items():
            if len(found) < limit and room > 0:
                more = min(room, limit - len(found))
                found += self._limited_candidates(call, queue, wanted.wire_names, names, more)
        # A paused queue, or a limit or rate that held jobs back, may leave jobs a later
        # claim gets, and a claim that took all it could may have left more. A limited or
        # rated queue that held nothing back and ran out is drained like a free one: its
        # workers then wait to hear of new work instead of claiming after every result
        # (which kept their credit set aside from an enqueue's own claims: a non-binding
        # rate's p50 enqueue-to-start on PostgreSQL went 67 -> 56 ms and 81 -> 60 ms in two
        # loaded sittings, benchmarks/LOG.md 2026-12-06).
        held = any(self._held_back(call, queue) for queue in limited)
        drained = len(free) + len(limited) == len(wanted.queues) and not held and len(found) < limit
        return ClaimFound(found, drained, call.wake_at_ms)

    @staticmethod
    def _held_back(call: _Call, queue: str) -> bool:
        """Whether a control of ``queue`` may have held claimable jobs back in this call:
        its room ran out, a rate had no room, or keys had no room."""
        keys = call.key_rooms.get(queue)
        key_held = keys is not None and (keys.dropped or bool(keys.full()))
        return call.room.get(queue, 0) <= 0 or queue in call.rate_held or key_held

    # -- 1. eligible queues ---------------------------------------------------------------

    def _read_controls_with_jobs(self, call: _Call, queue: str, first: ClaimWanted) -> None:
        """PostgreSQL, one queue: its controls and, if they let claims take from it, the
        first request's candidates, in one statement (``claim_reads``)."""
        params = {
            "queue": queue,
            "now_ms": call.now_ms,
            "wire_names": list(first.wire_names),
            "limit": self._limit(first),
        }
        rows = CONTROLS_AND_CLAIMABLE.execute(self._conn, params)
        head = rows.rows[0]
        record = None if head[0] is None else _controls(head)
        if record is None or (record.free and not record.keyed) or self._rate_alone_read_first(record):
            with_jobs = [row for row in rows.rows if row[CONTROLS_AND_CLAIMABLE_JOB_ID_AT] is not None]
            call.prefetched[queue] = list(jobs_from(DriverRows(rows.keys(), with_jobs)))
        if record is not None:  # no row: no controls
            call.controls[queue] = record
            if not record.free and not record.paused:
                self.lock_queues([record.name])  # before its active jobs are counted (``_room``)

    def _rate_alone_read_first(self, queue: QueueRecord) -> bool:
        """Whether the jobs ``CONTROLS_AND_CLAIMABLE`` read of a queue whose one control is
        a queue-wide rate are its candidates: the rate's count, read after the queue's
        lock, then admits them (they are row-locked meanwhile: no other claim takes
        them). A read of their own was one more round trip of a rated queue's claim. The
        read sees this transaction's own new jobs: held writes go out before it."""
        if queue.keyed or queue.paused or queue.concurrency_limit is not None or queue.key_limit is not None:
            return False
        return queue.rate_count is not None and not queue.rate_per_key

    def _eligible(self, call: _Call, names: Iterable[str]) -> tuple[tuple[str, ...], dict[str, int]]:
        """The queues a claim may take from: those without a limit, and for each limited
        one its room. Paused queues hand out nothing."""
        free: list[str] = []
        limited: dict[str, int] = {}
        for name in names:
            queue = call.controls.get(name)
            if queue is None or queue.free:
                free.append(name)
            elif not queue.paused:
                limited[name] = self._room(call, queue)
        return tuple(free), limited

    def _room(self, call: _Call, queue: QueueRecord) -> int:
        """How many more jobs of a limited or rated queue this call may hand out: its
        concurrency limit's room, and a queue-wide rate's (a per-key rate is kept job by
        job, ``_admit_rated``)."""
        if queue.name not in call.room:
            limit = queue.concurrency_limit
            room = _NO_LIMIT if limit is None else limit - self.active_jobs(queue.name, limit)
            rate = rate_of(queue)
            if rate is not None and not rate.per_key:
                room = min(room, self._queue_rate_room(call, queue, rate))
            call.room[queue.name] = room
        return call.room[queue.name]

    def _queue_rate_room(self, call: _Call, queue: QueueRecord, rate: rates.QueueRate) -> int:
        """A queue-wide rate's room for this call."""
        room = rates.room(rate, self._rate_used(call, queue.name, rate)) or 0
        self._note_rate_held(call, rate, room == 0)
        if room == 0:
            call.rate_held.add(queue.name)
        return room

    # -- 4. rates -------------------------------------------------------------------------

    def _rate_used(self, call: _Call, queue: str, rate: rates.QueueRate) -> dict[str, int]:
        if queue not in call.rate_used:
            call.rate_used[queue] = self.rate_used(queue, rate, call.now_ms)
        return call.rate_used[queue]

    @staticmethod
    def _note_rate_held(call: _Call, rate: rates.QueueRate, held: bool) -> None:
        if held:
            next_slot = rate.slot_of(call.now_ms) + rate.slot_ms
            call.wake_at_ms = next_slot if call.wake_at_ms is None else min(call.wake_at_ms, next_slot)

    def _admit_rated(self, call: _Call, found: list[JobRecord], limit: int) -> list[JobRecord]:
        """The first ``limit`` of ``found`` that their queues' rates let claim now; they
        are counted in the call as reserved (the caller writes them reserved)."""
        by_queue: dict[str, list[JobRecord]] = {}
        for job in found:
            by_queue.setdefault(job.queue, []).append(job)
        admitted: set[str] = set()
        for queue, candidates in by_queue.items():
            rate = rate_of(call.controls[queue]) if queue in call.controls else None
            if rate is None:
                admitted.update(job.id for job in candidates)
                continue
            used = self._rate_used(call, queue, rate)
            taken, granted = rates.admit(rate, used, candidates, key_of, limit)
            admitted.update(job.id for job in taken)
            for key, n in granted.items():
                used[key] = used.get(key, 0) + n
            at_rate = len(taken) < len(candidates) or any(n >= rate.count for n in used.values())
            self._note_rate_held(call, rate, at_rate)
            if at_rate:
                call.rate_held.add(queue)
        return [job for job in found if job.id in admitted][:limit]

    # -- 2. queues with work --------------------------------------------------------------

    def _holds_work(self, call: _Call, queue: str) -> bool:
        """Whether ``queue`` held a claimable job when the call first asked: asked once,
        for every queue the call names, and only when it names more than one."""
        if len(call.named) <= 1:
            return True
        if call.with_work is None:
            unpaused = [q for q in call.named if not (q in call.controls and call.controls[q].paused)]
            call.with_work = frozenset(queues_with_work(self._conn, self._postgres, call.now_ms, unpaused))
        return queue in call.with_work

    # -- 3. ordered candidates ------------------------------------------------------------

    def _limited_candidates(
        self, call: _Call, queue: str, wire_names: Sequence[str], names: frozenset[str], limit: int
    ) -> list[JobRecord]:
        """A limited queue's candidates; with a per-key limit or rate, read again past the
        keys that reached it (``store.claim_keys``), at most ``MAX_KEY_ROUNDS`` times."""
        keys = self._key_room(call, call.controls[queue])
        if keys is None:
            return self._candidates(call, (queue,), wire_names, names, limit)
        found: list[JobRecord] = []
        for _ in range(MAX_KEY_ROUNDS):
            found += self._candidates(call, (queue,), wire_names, names, limit - len(found), keys)
            if not keys.dropped or len(found) >= limit:
                break
        return found

    def _key_room(self, call: _Call, queue: QueueRecord) -> KeyRoom | None:
        """The queue's keys' room for the call, when it has a per-key limit or rate."""
        rate = rate_of(queue)
        per_key_rate = rate if rate is not None and rate.per_key else None
        if queue.key_limit is None and per_key_rate is None:
            return None
        if queue.name not in call.key_rooms:
            used = self._rate_used(call, queue.name, per_key_rate) if per_key_rate is not None else {}
            rate_count = None if per_key_rate is None else per_key_rate.count
            call.key_rooms[queue.name] = self.key_room(queue.name, queue.key_limit, rate_count, used)
        return call.key_rooms[queue.name]

    def _candidates(
        self,
        call: _Call,
        queues: Sequence[str],
        wire_names: Sequence[str],
        names: frozenset[str],
        limit: int,
        keys: KeyRoom | None = None,
    ) -> list[JobRecord]:
        """The first ``limit`` claimable jobs of ``wire_names`` in ``queues`` that this
        call has not handed out, in claim order; handed out to the caller. With ``keys``
        (one per-key limited queue), only those whose key has room."""
        still = [q for q in queues if not any(names <= empty for empty in call.exhausted.get(q, ()))]
        found: list[JobRecord] = []
        read = 0
        for queue in sorted(still):
            if self._holds_work(call, queue):
                found += self._read_queue(call, queue, wire_names, limit, keys)
                read += 1
        if read > 1:
            found.sort(key=_claim_order)
        found = found[:limit]
        if len(found) < limit:
            for queue in still:
                call.exhausted.setdefault(queue, []).append(names)
        if keys is not None:  # step 4, then step 5
            found = keys.admit(found)
        found = self._admit_rated(call, found, limit)
        for job in found:
            call.taken.add(job.id)
            call.taken_from.setdefault(job.queue, []).append(job.id)
            if job.queue in call.room:
                call.room[job.queue] -= 1
            # The caller claims every job returned: none of them is left for other replicas.
            self._to_announce.discard(job.id)
        return found

    def _read_queue(
        self, call: _Call, queue: str, wire_names: Sequence[str], limit: int, keys: KeyRoom | None
    ) -> list[JobRecord]:
        """``queue``'s first ``limit`` claimable jobs of ``wire_names`` not handed out
        yet by this call (they are not claimed yet, so still claimable in the database)."""
        prefetched = call.prefetched.pop(queue, None)
        if prefetched is not None:  # read for this request, the call's first
            return prefetched
        params: dict[str, Any] = {
            "queue": queue,
            "now_ms": call.now_ms,
            "wire_names": list(wire_names),
            "limit": limit,
        }
        read = CLAIMABLE_IN_QUEUE
        taken = call.taken_from.get(queue)
        control = call.controls.get(queue)
        keyed = keys is not None or (control is not None and control.keyed)
        if keyed and not call.keyed_plans:
            call.keyed_plans = self.plan_keyed_reads()
        if keys is not None:
            read, past = self.key_limited_read(keys, taken or [], limit)
            params.update(past)
        elif taken:
            read, past = claimable_past(self._postgres, taken)
            params.update(past)
        found = list(jobs_from(self._read_locked(read, params)))
        if control is None or not control.keyed:
            return found
        full = frozenset(keys.full()) if keys is not None else frozenset()
        return self.take_turns(queue, found, limit, wire_names, taken or [], full, call.now_ms)


def _controls(head: Sequence[Any]) -> QueueRecord:
    """The queue's controls from a row of ``CONTROLS_AND_CLAIMABLE``."""
    name, paused, limit, key_limit, keyed, rate_count, rate_period_ms, rate_per_key = head[:8]
    return QueueRecord(
        name,
        bool(paused),
        limit,
        key_limit,
        bool(keyed),
        rate_count=rate_count,
        rate_period_ms=rate_period_ms,
        rate_per_key=bool(rate_per_key),
    )


def _claim_order(job: JobRecord) -> tuple[int, int, str]:
    return (-job.priority, job.run_at_ms, job.id)

"""Recurring schedules (R-18): create, list, pause, resume and delete them (each change
audited in its transaction), and fire their ticks.

Firing is one transaction per due schedule: lock its row (SKIP LOCKED: a replica finding
it taken leaves it to the one that has it), decide which ticks run and which were missed
(``domain.schedules.plan_ticks``), enqueue a job per tick to run with the idempotency key
``schedule:<name>:<tick>`` and advance the schedule, all committed together. The jobs
table's unique key makes each tick one job on any number of replicas, even one whose
row lock came too late; no leader is elected.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor
from coordinator.domain.clock import Clock
from coordinator.domain.records import Enqueued, NewJobSpec
from coordinator.domain.schedules import (
    MAX_LISTED_SKIPPED_TICKS,
    MAX_TIMEZONE_LENGTH,
    NewScheduleSpec,
    ScheduleRecord,
    ScheduleView,
    idempotency_key,
    plan_ticks,
)
from coordinator.errors import AlreadyExists, InvalidArgument, NotFound
from coordinator.service import audit
from coordinator.service.cron import Cron, CronError, normalize_cron
from coordinator.service.jobs import JobsService
from coordinator.service.paging import decode_schedule_token, encode_schedule_token
from coordinator.store import Store, Tx
from coordinator.validation import check_name, quote

log = logging.getLogger(__name__)

HOST_DEPENDENT_ZONES = frozenset({"localtime", "Factory"})
"""Names in the zone database that are not a place's time: ``localtime`` is the host's
own setting, which replicas need not share."""


@dataclass(frozen=True, slots=True)
class Fired:
    """What one schedule's pass did: the jobs it enqueued (with their specs, for the
    dispatcher and metrics) and how many ticks it recorded as skipped."""

    name: str
    enqueued: list[tuple[NewJobSpec, Enqueued]] = field(default_factory=list)
    skipped: int = 0


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - HOST_DEPENDENT_ZONES


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name``; InvalidArgument naming the field when there is none."""
    if not name or len(name) > MAX_TIMEZONE_LENGTH or not name.isprintable() or name not in _zone_names():
        raise InvalidArgument(
            "timezone",
            f"{quote(name)} is not an IANA time zone name; use one such as Europe/Berlin, "
            "America/New_York or UTC",
            reason="TIMEZONE_INVALID",
            metadata={"timezone": name[:64]},
        )
    return zoneinfo.ZoneInfo(name)


def parse_cron(expression: str) -> str:
    """The normalized expression; InvalidArgument naming the field and value when it is
    not a cron expression."""
    try:
        return normalize_cron(expression)
    except CronError as exc:
        raise InvalidArgument(
            "cron",
            f"{quote(expression)} is not a cron expression: {exc}",
            reason="CRON_INVALID",
            metadata={"cron": expression[:64]},
        ) from None


def _not_found(name: str) -> NotFound:
    return NotFound(
        f"schedule {quote(name)} does not exist", reason="SCHEDULE_NOT_FOUND", metadata={"name": name}
    )


def _exists(name: str) -> AlreadyExists:
    return AlreadyExists(
        f"schedule {quote(name)} exists already; delete it first or choose another name",
        reason="SCHEDULE_EXISTS",
        metadata={"name": name},
    )


def _check_payload_size(spec: NewScheduleSpec, max_payload_bytes: int) -> None:
    """InvalidArgument when the payload each tick's job would carry is over the limit."""
    if len(spec.payload) > max_payload_bytes:
        raise InvalidArgument(
            "payload",
            f"the {spec.wire_name} payload is {len(spec.payload)} bytes, over the limit of "
            f"{max_payload_bytes} bytes (max_payload_bytes); store the data elsewhere "
            "and put a reference to it in the payload",
            reason="PAYLOAD_TOO_LARGE",
            metadata={
                "wire_name": spec.wire_name,
                "size_bytes": len(spec.payload),
                "limit_bytes": max_payload_bytes,
            },
        )


def _first_tick(cron: Cron, spec: NewScheduleSpec, now_ms: int) -> int:
    """The schedule's first tick after ``now_ms``; InvalidArgument when the expression
    matches no time that exists in its zone (``Cron.next_after`` found none)."""
    next_tick = cron.next_after(now_ms)
    if next_tick is None:
        raise InvalidArgument(
            "cron",
            f"{quote(spec.cron)} matches no time that exists in {spec.timezone} in the next 50 years",
            reason="CRON_INVALID",
            metadata={"cron": spec.cron[:64]},
        )
    return next_tick


def _new_record(spec: NewScheduleSpec, expression: str, now_ms: int, next_tick_ms: int) -> ScheduleRecord:
    """The row of a schedule created at ``now_ms``: unpaused, never fired."""
    return ScheduleRecord(
        name=spec.name,
        cron=expression,
        timezone=spec.timezone,
        wire_name=spec.wire_name,
        payload=spec.payload,
        queue=spec.queue,
        catch_up=spec.catch_up,
        paused=False,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        next_tick_ms=next_tick_ms,
        last_tick_ms=None,
        last_job_id=None,
    )


def _creation_detail(record: ScheduleRecord) -> str:
    """The audit event's detail of a creation: the schedule's settings but its payload."""
    return (
        f"cron={record.cron} timezone={record.timezone} wire_name={record.wire_name} "
        f"queue={record.queue} catch_up={record.catch_up.value}"
    )


class SchedulesService:
    def __init__(self, store: Store, clock: Clock, config: CoordinatorConfig, jobs: JobsService) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.jobs = jobs

    # -- management ---------------------------------------------------------------------

    def create(self, spec: NewScheduleSpec, actor: Actor) -> ScheduleView:
        """Creates the schedule (audited); its first tick is the first after now.

        Raises InvalidArgument for a bad name, expression, zone, wire name, queue or
        payload, and AlreadyExists when the name is taken; nothing is created then.
        """
        expression, cron = self._checked_spec(spec)

        def create(tx: Tx) -> ScheduleRecord:
            if tx.schedules.get(spec.name) is not None:
                raise _exists(spec.name)
            now = self.clock.now_ms()
            record = _new_record(spec, expression, now, _first_tick(cron, spec, now))
            # A create racing on the same name fails this insert; the retry finds it.
            tx.schedules.insert(record)
            tx.insert_audit_event(
                audit.event(actor, audit.SCHEDULE_CREATE, spec.name, now, _creation_detail(record))
            )
            return record

        return self._view(self.store.transact(create, what="a schedule creation"), ())

    def _checked_spec(self, spec: NewScheduleSpec) -> tuple[str, Cron]:
        """The normalized expression and its ``Cron`` in the schedule's zone, once every
        field of ``spec`` is within the store's bounds (InvalidArgument for the first
        that is not, checked in the order of the fields)."""
        bounds = self.store.bounds
        check_name("name", spec.name)
        expression = parse_cron(spec.cron)
        cron = Cron(expression, load_zone(spec.timezone))
        check_name("wire_name", spec.wire_name, max_length=bounds.max_wire_name_length)
        check_name("queue", spec.queue)
        _check_payload_size(spec, bounds.max_payload_bytes)
        return expression, cron

    def pause(self, name: str, actor: Actor) -> ScheduleView:
        """Stops enqueueing its ticks (audited); pausing a paused schedule changes nothing."""
        check_name("name", name)

        def pause(tx: Tx) -> ScheduleRecord:
            record = tx.schedules.get(name)
            if record is None:
                raise _not_found(name)
            if record.paused:
                return record
            now = self.clock.now_ms()
            paused = dataclasses.replace(record, paused=True, next_tick_ms=None, updated_at_ms=now)
            tx.schedules.update(paused)
            tx.insert_audit_event(audit.event(actor, audit.SCHEDULE_PAUSE, name, now))
            return paused

        return self._view_with_skipped(self.store.transact(pause, what="a schedule pause"))

    def resume(self, name: str, actor: Actor) -> ScheduleView:
        """Enqueues its ticks again from the first after now (audited): ticks while it was
        paused are neither run nor recorded. Resuming an active schedule changes nothing."""
        check_name("name", name)

        def resume(tx: Tx) -> ScheduleRecord:
            record = tx.schedules.get(name)
            if record is None:
                raise _not_found(name)
            if not record.paused:
                return record
            now = self.clock.now_ms()
            next_tick = self._cron(record).next_after(now)
            resumed = dataclasses.replace(record, paused=False, next_tick_ms=next_tick, updated_at_ms=now)
            tx.schedules.update(resumed)
            tx.insert_audit_event(audit.event(actor, audit.SCHEDULE_RESUME, name, now))
            return resumed

        return self._view_with_skipped(self.store.transact(resume, what="a schedule resume"))

    def delete(self, name: str, actor: Actor) -> ScheduleView:
        """Deletes the schedule and its skipped ticks (audited) and returns it as it was;
        jobs it enqueued stay."""
        check_name("name", name)

        def delete(tx: Tx) -> ScheduleRecord:
            record = tx.schedules.get(name)
            if record is None:
                raise _not_found(name)
            now = self.clock.now_ms()
            tx.schedules.delete(name)
            detail = f"cron={record.cron} timezone={record.timezone} wire_name={record.wire_name}"
            tx.insert_audit_event(audit.event(actor, audit.SCHEDULE_DELETE, name, now, detail))
            return record

        record = self.store.transact(delete, what="a schedule deletion")
        return ScheduleView(record, (), ())

    def run_now(self, name: str, actor: Actor) -> Fired:
        """Enqueues one job from the schedule now (audited): its wire name, payload and
        queue, to run at once, with no idempotency key (each press is a job of its own).
        The schedule's own ticks are not moved, and a paused schedule runs too."""
        check_name("name", name)

        def run(tx: Tx) -> Fired:
            record = tx.schedules.get(name)
            if record is None:
                raise _not_found(name)
            spec = NewJobSpec(record.wire_name, record.payload, queue=record.queue)
            (enqueued,) = self.jobs.enqueue_in(tx, [spec])
            now = self.clock.now_ms()
            tx.insert_audit_event(
                audit.event(actor, audit.SCHEDULE_RUN_NOW, name, now, f"job {enqueued.job_id}")
            )
            return Fired(name, [(spec, enqueued)])

        return self.store.transact(run, what="a schedule's run now")

    # -- ticks --------------------------------------------------------------------------

    def due_names(self) -> list[str]:
        """Schedules whose next tick has come (read without locks; ``fire`` re-checks)."""
        return self.store.due_schedule_names(self.clock.now_ms(), self.config.maintenance_batch)

    def fire(self, name: str) -> Fired:
        """Enqueues the schedule's ticks that have come and records the missed ones, in
        one transaction; does nothing when the schedule is no longer due or another
        transaction holds it."""
        return self.store.transact(lambda tx: self._fire(tx, name), what="a schedule tick")

    def _fire(self, tx: Tx, name: str) -> Fired:
        now = self.clock.now_ms()
        record = tx.schedules.due(name, now)
        if record is None or record.next_tick_ms is None:
            return Fired(name)
        bounds = self.store.bounds
        plan = plan_ticks(
            self._cron(record),
            next_tick_ms=record.next_tick_ms,
            now_ms=now,
            grace_ms=int(self.config.schedule_grace_s * 1000),
            catch_up=record.catch_up,
            keep_skipped=bounds.max_skipped_ticks,
            max_run=bounds.max_enqueue_batch,
        )
        specs = [
            NewJobSpec(
                record.wire_name,
                record.payload,
                queue=record.queue,
                run_at_ms=tick,
                idempotency_key=idempotency_key(name, tick),
            )
            for tick in plan.run
        ]
        skipped = list(plan.skipped)
        enqueued: Sequence[Enqueued] = ()
        if specs:
            try:
                enqueued = self.jobs.enqueue_in(tx, specs)
            except InvalidArgument as exc:
                # Checked at creation; a bound lowered since can refuse them. The ticks
                # are recorded as skipped rather than tried again every pass.
                log.warning("schedule %s: its jobs are refused (%s); ticks recorded as skipped", name, exc)
                skipped = sorted({*skipped, *plan.run})[-bounds.max_skipped_ticks :]
                specs = []
        advanced = dataclasses.replace(record, next_tick_ms=plan.next_tick_ms)
        if enqueued:
            advanced = dataclasses.replace(
                advanced, last_tick_ms=plan.run[-1], last_job_id=enqueued[-1].job_id
            )
        tx.schedules.update(advanced)
        tx.schedules.add_skipped_ticks(name, skipped, now, bounds.max_skipped_ticks)
        if skipped:
            log.info("schedule %s: %d missed ticks recorded as skipped", name, len(skipped))
        return Fired(name, list(zip(specs, enqueued, strict=True)), len(skipped))

    # -- views --------------------------------------------------------------------------

    def _cron(self, record: ScheduleRecord) -> Cron:
        return Cron(record.cron, load_zone(record.timezone))

    def _view(self, record: ScheduleRecord, skipped: Sequence[int]) -> ScheduleView:
        next_runs = () if record.paused else self._cron(record).upcoming(record.next_tick_ms)
        return ScheduleView(record, next_runs, tuple(skipped))

    def _view_with_skipped(self, record: ScheduleRecord) -> ScheduleView:
        per_schedule = min(MAX_LISTED_SKIPPED_TICKS, self.store.bounds.max_skipped_ticks)
        skipped = self.store.newest_skipped_ticks([record.name], per_schedule)
        return self._view(record, skipped.get(record.name, ()))

    # -- reads (last: ``list`` shadows the builtin in annotations below it) ------------

    def list(self, *, page_size: int, page_token: str) -> tuple[list[ScheduleView], str]:
        """A page of schedules by name and the next page's token ('' at the end); each
        with its next runs and newest skipped ticks."""
        if page_size < 0:
            raise InvalidArgument(
                "page_size", f"must not be negative, got {page_size}", reason="OUT_OF_RANGE"
            )
        size = self.store.bounds.clamp_page_size(page_size or self.config.default_page_size)
        after = decode_schedule_token(page_token) if page_token else None
        records = self.store.list_schedules(after_name=after, limit=size + 1)
        page = records[:size]
        per_schedule = min(MAX_LISTED_SKIPPED_TICKS, self.store.bounds.max_skipped_ticks)
        skipped = self.store.newest_skipped_ticks([r.name for r in page], per_schedule)
        views = [self._view(record, skipped.get(record.name, ())) for record in page]
        return views, (encode_schedule_token(page[-1].name) if len(records) > size else "")

"""The chaos checker: pure functions over a run's history (``tests.chaos.history``).

Each invariant is a function of the ``Model`` (the history indexed) returning how many
subjects it checked, how many it could not decide, and its violations. ``check`` runs
them all and returns a ``Report`` with the summary the suite prints.

What the history holds (``kind`` of each event, fields the checker reads):

- ``enqueue``: a batch the coordinator acknowledged: ``keys`` and ``ids`` (same order),
  and the ``concurrency_keys`` the jobs were given (``''``: the implicit key).
- ``start`` / ``finish`` (worker processes): a handler call (``job``, ``attempt``,
  ``execution``, ``generation``, ``worker_id``) and how it ended (``result``:
  ``returned`` with ``output``, ``raised``, ``cancelled``).
- ``ack`` (worker processes): a ResultAck for ``attempt``: ``status`` (``accepted``,
  ``stale``, ``rejected``) and the ``outcome`` the worker had reported.
- ``fault`` / ``heal``: the nemesis (``fault`` kind, ``id``, ``worker_id``, ``proxy``,
  ``delay_ms``, ``heal`` mode); a ``heal`` names the ``id`` it ends.
- ``coordinator_up`` / ``coordinator_down``: a replica listening, or killed. A
  ``pg_restart`` fault (the database restarting) counts as every replica down.
- ``poll``: the observer's read of leased jobs: ``held`` = [job, attempt, state,
  lease_expires_ms] rows, ``wall`` = when the read was sent.
- ``cancel``: a cancel the coordinator acknowledged (``ok``), with the job's ``state``
  and ``generation`` in its answer (``wall`` = when the answer came).
- ``final_job`` / ``final_attempt``: the coordinator's records read back at the end.
- ``queue_rate`` / ``queue_key_limit`` / ``queue_limit``: a control set on the
  workload's queue (``count``/``period_ms``, or ``limit``; ``wall`` = when the answer came).

Header fields used: ``lease_ms``, ``maintenance_ms``, ``slack_ms``, ``clock_tol_ms``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.history import Event, History
from tests.chaos.jobs import attempt_of_output

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
LAPSED = frozenset({"abandoned", "unstarted_abandoned"})
"""Outcomes the coordinator records when a lease lapses."""
RETRYABLE = frozenset({"retryable_failure", "timed_out", "interrupted", "abandoned"})
"""R-5: outcomes retried while the budget lasts, after an R-2 delay."""
SILENCING_FAULTS = frozenset({"kill9_worker", "sigstop_worker"})
OUTAGE_FAULTS = frozenset({"pg_restart"})
"""Faults during which no coordinator can write (the database is down)."""
INF = math.inf


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    job: str | None = None
    attempt: str | None = None

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message}"


@dataclass
class Outcome:
    """What one invariant found."""

    checked: int = 0
    unverified: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Window:
    start: float
    end: float
    event: Event


class Model:
    """The history indexed for the invariants."""

    def __init__(self, history: History) -> None:
        header = history.header
        self.header = header
        self.lease_ms = float(header.get("lease_ms", 2_000))
        self.maintenance_ms = float(header.get("maintenance_ms", 200))
        self.slack_ms = float(header.get("slack_ms", 1_500))
        self.clock_tol_ms = float(header.get("clock_tol_ms", 250))
        self.events = history.events
        self.jobs: dict[str, dict[str, Any]] = {}
        self.attempts: dict[str, dict[str, Any]] = {}
        self.attempts_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.starts: dict[str, list[Event]] = defaultdict(list)
        self.finishes: dict[str, list[Event]] = defaultdict(list)
        self.acks: dict[str, list[Event]] = defaultdict(list)
        self.enqueues: list[Event] = []
        self.polls: list[Event] = []
        self.cancels: list[Event] = []
        faults: dict[Any, Event] = {}
        heals: dict[Any, Event] = {}
        self.fault_events: list[Event] = []
        replica_events: dict[str, list[Event]] = defaultdict(list)
        for event in history.events:
            kind = event.get("kind")
            if kind == "final_job":
                self.jobs[event["job"]["id"]] = event["job"]
            elif kind == "final_attempt":
                attempt = event["attempt"]
                self.attempts[attempt["id"]] = attempt
                self.attempts_of[attempt["job"]].append(attempt)
            elif kind == "start":
                self.starts[event["attempt"]].append(event)
            elif kind == "finish":
                self.finishes[event["attempt"]].append(event)
            elif kind == "ack":
                self.acks[event["attempt"]].append(event)
            elif kind == "enqueue":
                self.enqueues.append(event)
            elif kind == "poll":
                self.polls.append(event)
            elif kind == "cancel" and event.get("ok"):
                self.cancels.append(event)
            elif kind == "fault":
                faults[event["id"]] = event
                self.fault_events.append(event)
            elif kind == "heal":
                heals[event["id"]] = event
            elif kind in ("coordinator_up", "coordinator_down"):
                replica_events[event["replica"]].append(event)
        for listed in self.attempts_of.values():
            listed.sort(key=lambda a: (a["claimed_at"], a["id"]))
        self.windows: dict[Any, Window] = {
            fault_id: Window(fault["wall"], heals[fault_id]["wall"] if fault_id in heals else INF, fault)
            for fault_id, fault in faults.items()
        }
        self.up: dict[str, list[tuple[float, float]]] = {}
        """Each replica's periods of serving, from ``coordinator_up`` to the next
        ``coordinator_down`` (before its first start a replica is down)."""
        for replica, changes in replica_events.items():
            changes.sort(key=lambda e: e["wall"])
            periods: list[tuple[float, float]] = []
            came_up: float | None = None
            for change in changes:
                if change["kind"] == "coordinator_up" and came_up is None:
                    came_up = change["wall"]
                elif change["kind"] == "coordinator_down" and came_up is not None:
                    periods.append((came_up, change["wall"]))
                    came_up = None
            if came_up is not None:
                periods.append((came_up, INF))
            self.up[replica] = periods
        # While the database restarts, no replica can recover anything.
        outages = [(w.start, w.end) for w in self.windows.values() if w.event.get("fault") in OUTAGE_FAULTS]
        for replica, periods in self.up.items():
            self.up[replica] = _without(periods, outages)

    def recovery_deadline(self, t: float) -> float:
        """The latest a lease that lapsed at ``t`` may be recovered: a maintenance
        interval plus the slack after ``t``, counted from when a coordinator serves,
        in a period of serving long enough for that (a replica killed again right
        after it came back may not have run a pass). Without coordinator events in the
        history, counted from ``t``."""
        allowed = self.maintenance_ms + self.slack_ms
        if not self.up:
            return t + allowed
        best = INF
        for periods in self.up.values():
            for start, end in periods:
                begin = max(start, t)
                if end - begin >= allowed:
                    best = min(best, begin + allowed)
                    break
        return best

    def proxy_windows(self, proxy: str | None, *faults: str) -> list[Window]:
        return [
            w
            for w in self.windows.values()
            if w.event.get("fault") in faults and (proxy is None or w.event.get("proxy") == proxy)
        ]

    def acknowledged(self) -> dict[str, str]:
        """Job ID -> idempotency key of every acknowledged enqueue."""
        acked: dict[str, str] = {}
        for event in self.enqueues:
            acked.update(zip(event["ids"], event["keys"], strict=True))
        return acked


def _without(
    periods: list[tuple[float, float]], gaps: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``periods`` with the ``gaps`` cut out."""
    for gap_start, gap_end in gaps:
        cut: list[tuple[float, float]] = []
        for start, end in periods:
            if gap_end <= start or end <= gap_start:
                cut.append((start, end))
                continue
            if start < gap_start:
                cut.append((start, gap_start))
            if gap_end < end:
                cut.append((gap_end, end))
        periods = cut
    return periods


def _ms(value: float) -> str:
    return "never" if value == INF else f"{value:.0f} ms"


# -- the invariants ---------------------------------------------------------------------


def acknowledged_jobs_terminal(m: Model) -> Outcome:
    """Every acknowledged enqueue names a job that exists and ended (after the quiet
    period)."""
    out = Outcome()
    for job_id, key in sorted(m.acknowledged().items()):
        out.checked += 1
        job = m.jobs.get(job_id)
        if job is None:
            out.violations.append(
                Violation(
                    "acknowledged_jobs_terminal",
                    f"job {job_id} (key {key}) is not on the coordinator",
                    job_id,
                )
            )
        elif job["state"] not in TERMINAL:
            out.violations.append(
                Violation(
                    "acknowledged_jobs_terminal",
                    f"job {job_id} (key {key}) is still {job['state']} after the quiet period",
                    job_id,
                )
            )
    return out


def idempotent_enqueue(m: Model) -> Outcome:
    """An idempotency key acknowledged more than once (retried batches) names one job,
    and that job carries the key."""
    out = Outcome()
    ids_of: dict[str, set[str]] = defaultdict(set)
    for event in m.enqueues:
        for job_id, key in zip(event["ids"], event["keys"], strict=True):
            ids_of[key].add(job_id)
    for key, ids in sorted(ids_of.items()):
        out.checked += 1
        if len(ids) > 1:
            out.violations.append(
                Violation("idempotent_enqueue", f"key {key} was acknowledged as jobs {sorted(ids)}")
            )
            continue
        [job_id] = ids
        job = m.jobs.get(job_id)
        if job is not None and job.get("idempotency_key") != key:
            out.violations.append(
                Violation(
                    "idempotent_enqueue",
                    f"job {job_id} was acknowledged for key {key} but carries {job.get('idempotency_key')!r}",
                    job_id,
                )
            )
    return out


def single_success_per_generation(m: Model) -> Outcome:
    """No job succeeds twice in one generation: at most one attempt recorded succeeded,
    and at most one attempt whose worker was told its success was accepted."""
    out = Outcome()
    recorded: dict[tuple[str, int], list[str]] = defaultdict(list)
    for attempt in m.attempts.values():
        if attempt["outcome"] == "succeeded":
            recorded[(attempt["job"], attempt["generation"])].append(attempt["id"])
    accepted: dict[tuple[str, int], set[str]] = defaultdict(set)
    for attempt_id, acks in m.acks.items():
        if not any(a["status"] == "accepted" and a.get("outcome") == "succeeded" for a in acks):
            continue
        owner = _owner(m, attempt_id)
        if owner is None:
            continue  # handler_calls_granted and no_stale_result_accepted report it
        accepted[owner].add(attempt_id)
    out.checked = len(m.jobs)
    for (job_id, generation), ids in sorted(recorded.items()):
        if len(ids) > 1:
            out.violations.append(
                Violation(
                    "single_success_per_generation",
                    f"job {job_id} generation {generation} has {len(ids)} succeeded attempts: {sorted(ids)}",
                    job_id,
                )
            )
    for (job_id, generation), acked in sorted(accepted.items()):
        if len(acked) > 1:
            out.violations.append(
                Violation(
                    "single_success_per_generation",
                    f"job {job_id} generation {generation}: workers were told the successes of "
                    f"{len(acked)} attempts were accepted: {sorted(acked)}",
                    job_id,
                )
            )
    return out


def _owner(m: Model, attempt_id: str) -> tuple[str, int] | None:
    attempt = m.attempts.get(attempt_id)
    if attempt is not None:
        return attempt["job"], attempt["generation"]
    for start in m.starts.get(attempt_id, []):
        return start["job"], start["generation"]
    return None


def no_stale_result_accepted(m: Model) -> Outcome:
    """A result acknowledged as accepted is what the coordinator recorded for that
    attempt: never accepted from an attempt it had already ended otherwise (superseded,
    lease lapsed). A success told stale was not recorded either."""
    out = Outcome()
    for attempt_id, acks in sorted(m.acks.items()):
        attempt = m.attempts.get(attempt_id)
        for ack in acks:
            reported = ack.get("outcome")
            if reported is None:
                continue  # a repeated ack for a result no longer unacknowledged
            out.checked += 1
            if ack["status"] == "accepted":
                if attempt is None:
                    out.violations.append(
                        Violation(
                            "no_stale_result_accepted",
                            f"attempt {attempt_id}: result {reported} accepted, "
                            "but the coordinator has no such attempt",
                            attempt=attempt_id,
                        )
                    )
                elif attempt["outcome"] != reported:
                    out.violations.append(
                        Violation(
                            "no_stale_result_accepted",
                            f"attempt {attempt_id} of job {attempt['job']}: result {reported} was "
                            f"acknowledged as accepted, but the coordinator recorded the attempt "
                            f"{attempt['outcome']}",
                            attempt["job"],
                            attempt_id,
                        )
                    )
            elif (
                ack["status"] == "stale"
                and reported == "succeeded"
                and attempt is not None
                and attempt["outcome"] == "succeeded"
            ):
                out.violations.append(
                    Violation(
                        "no_stale_result_accepted",
                        f"attempt {attempt_id} of job {attempt['job']}: success answered stale, "
                        "yet the coordinator recorded the attempt succeeded",
                        attempt["job"],
                        attempt_id,
                    )
                )
    return out


def executions_match_attempts(m: Model) -> Outcome:
    """A job's ``executions`` is the number of started attempts of its current
    generation; in every generation the started attempts are numbered 1..k in claim
    order and k never exceeds ``max_executions``."""
    out = Outcome()
    for job_id, job in sorted(m.jobs.items()):
        out.checked += 1
        by_generation: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for attempt in m.attempts_of.get(job_id, []):
            if attempt["execution"] > 0 or attempt.get("started_at") is not None:
                by_generation[attempt["generation"]].append(attempt)
        current = len(by_generation.get(job["generation"], []))
        if job["executions"] != current:
            out.violations.append(
                Violation(
                    "executions_match_attempts",
                    f"job {job_id} counts {job['executions']} executions in generation {job['generation']} "
                    f"but has {current} started attempts",
                    job_id,
                )
            )
        for generation, started in sorted(by_generation.items()):
            numbers = [a["execution"] for a in started]
            if numbers != list(range(1, len(numbers) + 1)):
                out.violations.append(
                    Violation(
                        "executions_match_attempts",
                        f"job {job_id} generation {generation}: started attempts numbered {numbers}",
                        job_id,
                    )
                )
            if len(started) > job["max_executions"]:
                out.violations.append(
                    Violation(
                        "executions_match_attempts",
                        f"job {job_id} generation {generation}: {len(started)} executions, "
                        f"above max_executions {job['max_executions']}",
                        job_id,
                    )
                )
    return out


def attempts_exclusive(m: Model) -> Outcome:
    """One holder at a time: a job's next attempt is claimed only after the previous
    one ended, and only the last attempt may still be open."""
    out = Outcome()
    for job_id, attempts in sorted(m.attempts_of.items()):
        out.checked += 1
        for before, after in itertools.pairwise(attempts):
            ended = before.get("finished_at")
            if ended is None or ended > after["claimed_at"] + m.clock_tol_ms:
                out.violations.append(
                    Violation(
                        "attempts_exclusive",
                        f"job {job_id}: attempt {after['id']} was claimed at {after['claimed_at']} while "
                        f"attempt {before['id']} was open (ended {ended})",
                        job_id,
                        after["id"],
                    )
                )
    return out


def handler_calls_granted(m: Model) -> Outcome:
    """Every handler call is a start the coordinator granted: the attempt exists, was
    started, on that worker, with the execution number and generation the handler saw;
    and each attempt's handler is called at most once."""
    out = Outcome()
    for attempt_id, starts in sorted(m.starts.items()):
        out.checked += 1
        first = starts[0]
        if len(starts) > 1:
            out.violations.append(
                Violation(
                    "handler_calls_granted",
                    f"attempt {attempt_id} of job {first['job']}: handler called {len(starts)} times",
                    first["job"],
                    attempt_id,
                )
            )
        attempt = m.attempts.get(attempt_id)
        if attempt is None:
            out.violations.append(
                Violation(
                    "handler_calls_granted",
                    f"handler ran for attempt {attempt_id} of job {first['job']}, unknown to the coordinator",
                    first["job"],
                    attempt_id,
                )
            )
            continue
        seen = (first["job"], first["execution"], first["generation"], first["worker_id"])
        recorded = (attempt["job"], attempt["execution"], attempt["generation"], attempt["worker_id"])
        if attempt.get("started_at") is None or seen != recorded:
            out.violations.append(
                Violation(
                    "handler_calls_granted",
                    f"attempt {attempt_id}: handler called as (job, execution, generation, worker) = {seen}, "
                    f"coordinator recorded {recorded}, started at {attempt.get('started_at')}",
                    attempt["job"],
                    attempt_id,
                )
            )
    return out


def lease_recovered_in_time(m: Model) -> Outcome:
    """Every lapsed lease is recovered after it expired, and within one maintenance
    interval (plus slack) of its expiry, or of a coordinator being back if none served
    then. The expiry is the lease last seen by the observer's polls of leased jobs:
    decidable when the last sighting is within a lease of the recovery (a renewal after
    it would have put the expiry after the recovery, which the same check catches)."""
    out = Outcome()
    seen_until: dict[str, float] = {}
    lease_seen: dict[str, float] = {}
    for poll in m.polls:
        for _job, attempt_id, _state, lease_ms in poll["held"]:
            if lease_ms is None:
                continue
            seen_until[attempt_id] = max(seen_until.get(attempt_id, -INF), poll["wall"])
            lease_seen[attempt_id] = max(lease_seen.get(attempt_id, -INF), float(lease_ms))
    latest = -INF
    for attempt in sorted(m.attempts.values(), key=lambda a: a["id"]):
        if attempt["outcome"] not in LAPSED:
            continue
        attempt_id, recovered = attempt["id"], attempt.get("finished_at")
        if attempt_id not in lease_seen or recovered is None:
            out.unverified += 1
            continue
        expiry = lease_seen[attempt_id]
        out.checked += 1
        if recovered < expiry - m.clock_tol_ms:
            out.violations.append(
                Violation(
                    "lease_recovered_in_time",
                    f"attempt {attempt_id} of job {attempt['job']} recovered at {recovered:.0f}, "
                    f"{expiry - recovered:.0f} ms before its lease expired ({expiry:.0f})",
                    attempt["job"],
                    attempt_id,
                )
            )
            continue
        if recovered - seen_until[attempt_id] > m.lease_ms:
            out.checked -= 1
            out.unverified += 1
            continue
        deadline = m.recovery_deadline(expiry)
        latest = max(latest, recovered - expiry)
        if recovered > deadline:
            out.violations.append(
                Violation(
                    "lease_recovered_in_time",
                    f"attempt {attempt_id} of job {attempt['job']}: lease expired at {expiry:.0f}, "
                    f"recovered {recovered - expiry:.0f} ms later (allowed until {_ms(deadline - expiry)} "
                    "after the expiry: a maintenance interval plus slack, after a coordinator is back)",
                    attempt["job"],
                    attempt_id,
                )
            )
    if latest > -INF:
        out.notes.append(f"latest recovery {latest:.0f} ms after expiry")
    return out


def silenced_worker_recovered(m: Model) -> Outcome:
    """When a worker is killed (-9) or stopped longer than a lease, every attempt it
    held is over within a lease (from its last possible contact) plus a maintenance
    interval and slack: nothing renews the leases of a silent worker."""
    out = Outcome()
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for attempt in m.attempts.values():
        by_worker[attempt["worker_id"]].append(attempt)
    for window in sorted(m.windows.values(), key=lambda w: w.start):
        fault = window.event
        if fault.get("fault") not in SILENCING_FAULTS:
            continue
        silent_from = window.start
        resumed = INF if fault["fault"] == "kill9_worker" else window.end
        last_contact = _last_contact(m, fault.get("proxy"), silent_from)
        for attempt in by_worker.get(fault["worker_id"], []):
            finished = attempt.get("finished_at")
            if finished is not None and finished <= silent_from:
                continue
            if attempt["claimed_at"] >= resumed:
                continue
            base = max(last_contact, float(attempt["claimed_at"]))
            deadline = m.recovery_deadline(base + m.lease_ms)
            if resumed < deadline:
                out.unverified += 1  # it may have woken and renewed or reported first
                continue
            out.checked += 1
            if finished is None or finished > deadline:
                ended = "never" if finished is None else f"{finished - base:.0f} ms after its last contact"
                out.violations.append(
                    Violation(
                        "silenced_worker_recovered",
                        f"attempt {attempt['id']} of job {attempt['job']}: its worker "
                        f"{fault['worker_id']} went silent ({fault['fault']}) at {silent_from:.0f}, "
                        f"the attempt ended {ended} (allowed {_ms(deadline - base)})",
                        attempt["job"],
                        attempt["id"],
                    )
                )
    return out


def _last_contact(m: Model, proxy: str | None, silent_from: float) -> float:
    """The latest time a message the worker sent before ``silent_from`` may reach the
    coordinator: delayed bytes (``proxy_delay``) and bytes held by a half-open proxy that
    later resumed forwarding arrive late."""
    contact = silent_from
    for window in m.proxy_windows(proxy, "proxy_partition"):
        if window.start <= silent_from < window.end and window.event.get("heal") == "resume":
            contact = max(contact, window.end)
    delay = 0.0
    for window in m.proxy_windows(proxy, "proxy_delay"):
        if window.start <= contact and window.end >= silent_from - m.lease_ms:
            delay = max(delay, float(window.event.get("delay_ms", 0)))
    return contact + delay


def nominal_delay_ms(n: int, initial_ms: int, max_ms: int) -> int:
    """``initial * 2^(n-1)`` capped at ``max`` (R-2, R-4)."""
    return min(initial_ms << min(max(n, 1) - 1, 40), max_ms)


def retry_delay_within_bounds(m: Model) -> Outcome:
    """R-2: a retry's delay is equal jitter, in [nominal/2, nominal] with nominal =
    min(initial * 2^(n-1), max) after execution n; R-4: an unstarted claim's re-queue
    delay is exactly nominal for its streak. And the next attempt is not claimed before
    the delay is over."""
    out = Outcome()
    for job_id, attempts in sorted(m.attempts_of.items()):
        job = m.jobs.get(job_id)
        if job is None:
            continue
        for index, attempt in enumerate(attempts):
            delay = attempt.get("retry_delay_ms")
            if delay is None:
                continue
            out.checked += 1
            outcome = attempt["outcome"]
            where = f"attempt {attempt['id']} of job {job_id} ({outcome}, execution {attempt['execution']})"
            if outcome == "unstarted_abandoned":
                streak = _unstarted_streak(attempts, index)
                expected = nominal_delay_ms(streak, job["unstarted_initial_ms"], job["unstarted_max_ms"])
                if delay != expected:
                    out.violations.append(
                        Violation(
                            "retry_delay_within_bounds",
                            f"{where}: re-queue delay {delay} ms, expected {expected} ms for streak {streak}",
                            job_id,
                            attempt["id"],
                        )
                    )
            elif outcome in RETRYABLE:
                nominal = nominal_delay_ms(attempt["execution"], job["retry_initial_ms"], job["retry_max_ms"])
                low = (nominal + 1) // 2
                if not low <= delay <= nominal:
                    out.violations.append(
                        Violation(
                            "retry_delay_within_bounds",
                            f"{where}: retry delay {delay} ms outside [{low}, {nominal}] ms",
                            job_id,
                            attempt["id"],
                        )
                    )
            else:
                out.violations.append(
                    Violation(
                        "retry_delay_within_bounds",
                        f"{where}: a retry delay ({delay} ms) on an outcome that is not retried",
                        job_id,
                        attempt["id"],
                    )
                )
            following = next(
                (a for a in attempts[index + 1 :] if a["generation"] == attempt["generation"]), None
            )
            finished = attempt.get("finished_at")
            if following is not None and finished is not None:
                due = finished + delay
                if following["claimed_at"] < due - m.clock_tol_ms:
                    out.violations.append(
                        Violation(
                            "retry_delay_within_bounds",
                            f"{where}: next attempt {following['id']} claimed "
                            f"{due - following['claimed_at']:.0f} ms before the {delay} ms delay was over",
                            job_id,
                            following["id"],
                        )
                    )
    return out


def _unstarted_streak(attempts: list[dict[str, Any]], index: int) -> int:
    """R-4: consecutive unstarted lapses ending at ``index``; a release keeps the
    streak, a start (or a new generation) resets it."""
    generation = attempts[index]["generation"]
    streak = 1
    for earlier in reversed(attempts[:index]):
        if earlier["generation"] != generation:
            break
        if earlier["outcome"] == "released":
            continue
        if earlier["outcome"] != "unstarted_abandoned":
            break
        streak += 1
    return streak


def terminal_state_consistent(m: Model) -> Outcome:
    """An ended job has no open attempt; a succeeded job's last attempt of its current
    generation is its one success, and its output is what that attempt's handler
    returned; a failed or cancelled job has no success in its current generation."""
    out = Outcome()
    for job_id, job in sorted(m.jobs.items()):
        if job["state"] not in TERMINAL:
            continue
        out.checked += 1
        attempts = m.attempts_of.get(job_id, [])
        open_ = [a["id"] for a in attempts if a["outcome"] is None]
        if open_:
            out.violations.append(
                Violation(
                    "terminal_state_consistent",
                    f"job {job_id} is {job['state']} with open attempts {open_}",
                    job_id,
                )
            )
        current = [a for a in attempts if a["generation"] == job["generation"]]
        successes = [a for a in current if a["outcome"] == "succeeded"]
        if job["state"] != "succeeded":
            if successes:
                out.violations.append(
                    Violation(
                        "terminal_state_consistent",
                        f"job {job_id} is {job['state']} but attempt {successes[0]['id']} succeeded",
                        job_id,
                    )
                )
            continue
        if not current or current[-1]["outcome"] != "succeeded":
            last = current[-1]["outcome"] if current else None
            out.violations.append(
                Violation(
                    "terminal_state_consistent",
                    f"job {job_id} succeeded but its last attempt ended {last}",
                    job_id,
                )
            )
            continue
        winner = current[-1]
        returned = [
            f.get("output") for f in m.finishes.get(winner["id"], []) if f.get("result") == "returned"
        ]
        if job.get("output") not in returned:
            out.violations.append(
                Violation(
                    "terminal_state_consistent",
                    f"job {job_id}: output {job.get('output')!r} (from attempt "
                    f"{attempt_of_output(job.get('output'))}) is not what the handler of its "
                    f"succeeded attempt {winner['id']} returned ({returned})",
                    job_id,
                    winner["id"],
                )
            )
    return out


def cancel_respected(m: Model) -> Outcome:
    """R-8: once a cancel is acknowledged, its generation is never claimed again; a job
    that was not running ends cancelled, a running one ends cancelled unless that run
    succeeded first."""
    out = Outcome()
    for cancel in m.cancels:
        job_id, generation = cancel["job"], cancel.get("generation")
        job = m.jobs.get(job_id)
        if job is None or generation is None:
            out.unverified += 1
            continue
        out.checked += 1
        later = [
            a
            for a in m.attempts_of.get(job_id, [])
            if a["generation"] == generation and a["claimed_at"] > cancel["wall"] + m.clock_tol_ms
        ]
        if later:
            out.violations.append(
                Violation(
                    "cancel_respected",
                    f"job {job_id} generation {generation}: cancel acknowledged ({cancel['state']}) "
                    f"at {cancel['wall']:.0f}, yet attempt {later[0]['id']} was claimed at "
                    f"{later[0]['claimed_at']}",
                    job_id,
                    later[0]["id"],
                )
            )
        if job["generation"] != generation:
            continue  # retried by hand since: its generation's end is in the attempts
        allowed = {"cancelled"} if cancel["state"] != "running" else {"cancelled", "succeeded"}
        if job["state"] not in allowed:
            out.violations.append(
                Violation(
                    "cancel_respected",
                    f"job {job_id}: cancel acknowledged while {cancel['state']}, yet it ended {job['state']}",
                    job_id,
                )
            )
    return out


def queue_rate_respected(m: Model) -> Outcome:
    """Issue 41: once a queue rate of COUNT per PERIOD is set (a ``queue_rate`` event;
    the workload's jobs are all of one queue), no window of PERIOD holds more than COUNT
    starts, as the coordinator recorded them (the attempts' ``started_at``), whatever
    replicas were killed or restarted meanwhile."""
    out = Outcome()
    for rate in (e for e in m.events if e.get("kind") == "queue_rate"):
        since = rate["wall"] + m.clock_tol_ms
        starts = sorted(
            a["started_at"]
            for a in m.attempts.values()
            if a["started_at"] is not None and a["started_at"] >= since
        )
        out.checked += len(starts)
        ahead = 0
        for at, start in enumerate(starts):  # each start opens a window [start, start + period)
            ahead = max(ahead, at)
            while ahead < len(starts) and starts[ahead] < start + rate["period_ms"]:
                ahead += 1
            if ahead - at > rate["count"]:
                out.violations.append(
                    Violation(
                        "queue_rate_respected",
                        f"{ahead - at} starts in the {rate['period_ms']} ms from {start}, "
                        f"over the rate of {rate['count']} set at {rate['wall']:.0f}",
                    )
                )
                break
    return out


def concurrency_key_kept(m: Model) -> Outcome:
    """A job keeps the concurrency key it was enqueued with, whatever happened to it
    (retries, lapsed leases, manual retries): the read-back key is the enqueued one."""
    out = Outcome()
    for event in m.enqueues:
        if "concurrency_keys" not in event:
            continue  # a history from before keys
        for job_id, key in zip(event["ids"], event["concurrency_keys"], strict=True):
            job = m.jobs.get(job_id)
            if job is None or "concurrency_key" not in job:
                out.unverified += 1
                continue
            out.checked += 1
            if job["concurrency_key"] != key:
                out.violations.append(
                    Violation(
                        "concurrency_key_kept",
                        f"job {job_id} was enqueued with concurrency key {key!r}, "
                        f"the coordinator has {job['concurrency_key']!r}",
                        job_id,
                    )
                )
    return out


def key_limit_respected(m: Model) -> Outcome:
    """Issue 41: once a per-key running limit of N is set (a ``queue_key_limit``
    event; the workload's jobs are all of one queue), no claim makes more than N
    attempts of one concurrency key hold their jobs at once, on any worker or replica.
    See ``_running_limit_respected`` for what holding is."""
    return _running_limit_respected(m, "key_limit_respected", "queue_key_limit", _key_of(m), "per-key")


def queue_limit_respected(m: Model) -> Outcome:
    """Likewise for the queue's own running limit (a ``queue_limit`` event): no claim
    makes more than N of the queue's attempts hold their jobs at once."""
    return _running_limit_respected(m, "queue_limit_respected", "queue_limit", lambda _a: "", "queue")


def _key_of(m: Model) -> Callable[[dict[str, Any]], str | None]:
    """An attempt's concurrency key: its job's, as the coordinator read it back."""

    def key_of(attempt: dict[str, Any]) -> str | None:
        job = m.jobs.get(attempt["job"])
        return None if job is None else job.get("concurrency_key")

    return key_of


def _running_limit_respected(
    m: Model, name: str, kind: str, group_of: Callable[[dict[str, Any]], str | None], scope: str
) -> Outcome:
    """The coordinator's own meaning of a running limit (docs/flow-control.md): what it
    counts is the jobs ``reserved`` or ``running``. An attempt therefore holds its job
    from its claim (``claimed_at``) until the coordinator ended it (``finished_at``: a
    result, a release, a cancel, or the maintenance pass that recovered its lapsed
    lease), and for ever if it never ended. A worker killed -9 holds its jobs until
    that recovery, not merely until its lease expires: the claim counts leased states,
    not live leases, so a retry claimed between the expiry and the recovery is a
    violation. The handlers' own start/end records are not used: a worker stopped
    (SIGSTOP) past its lease runs its handler on after its job was recovered and
    claimed again (a lease is no fence), which no limit promises to prevent.

    Only a claim can raise the count, so the check is at each claim made once the
    limit was in force (its event plus the clock tolerance; a limit set later, or
    removed with None, takes over from its own event): the attempts holding at that
    instant, the claimed one included, jobs claimed before the limit included, must be
    at most the limit ("changes apply to the next claim").

    An end within the clock tolerance of a claim does not count as holding. On one
    clock no tolerance is needed: a claim is stamped after the queue row's lock and the
    key counts it decided on (issue 39), so after the commit of any end those counts
    saw, and that end was stamped before its own commit. What is left is two replicas'
    clocks: each is the host's plus its estimated database offset (R-13), wrong by at
    most half the round trip of its best sample, so the two disagree by tens of ms on a
    loaded machine; 250 ms covers that with room. Before the claim's stamp was taken
    after its lock it also had to cover the lock wait, which it did not always (2 and 68
    findings in two 10-minute runs of two PostgreSQL replicas). Checked again at 0 ms,
    5-minute runs of two PostgreSQL replicas (2026-12-07, load 13-15): before the fix
    293 of 1276 claims overlapped the end they followed (2 still past 100 ms), after it
    0 of 1418."""
    out = Outcome()
    changes = [event for event in m.events if event.get("kind") == kind]
    limits = sorted(
        ((event["wall"] + m.clock_tol_ms, event.get("limit")) for event in changes), key=lambda c: c[0]
    )
    if not limits:
        return out
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for attempt in m.attempts.values():
        group = group_of(attempt)
        if group is None:
            out.unverified += 1
        else:
            groups[group].append(attempt)
    most: dict[str, int] = {}
    for group, attempts in sorted(groups.items()):
        attempts.sort(key=lambda a: (a["claimed_at"], a["id"]))
        holding: list[tuple[float, str]] = []  # (end less the tolerance, attempt), a heap
        for attempt in attempts:
            claimed = float(attempt["claimed_at"])
            while holding and holding[0][0] < claimed:
                heapq.heappop(holding)
            finished = attempt.get("finished_at")
            end = INF if finished is None else max(claimed, finished - m.clock_tol_ms)
            heapq.heappush(holding, (end, attempt["id"]))
            limit = _in_force(limits, claimed)
            if limit is None:
                continue
            out.checked += 1
            most[group] = max(most.get(group, 0), len(holding))
            if len(holding) > limit:
                where = f"key {group!r}" if scope == "per-key" else "the queue"
                out.violations.append(
                    Violation(
                        name,
                        f"{where}: {len(holding)} attempts held jobs at {claimed:.0f}, when attempt "
                        f"{attempt['id']} of job {attempt['job']} was claimed, over the {scope} limit "
                        f"of {limit}: {sorted(a for _end, a in holding)}",
                        attempt["job"],
                        attempt["id"],
                    )
                )
    if most:
        shown = ", ".join(f"{group or '(all)'} {count}" for group, count in sorted(most.items())[:8])
        out.notes.append(f"most held at once: {shown}")
    return out


def _in_force(limits: list[tuple[float, int | None]], at: float) -> int | None:
    """The limit of the last change in force at ``at`` (None: no limit then)."""
    current: int | None = None
    for since, limit in limits:
        if since > at:
            break
        current = limit
    return current


INVARIANTS: dict[str, Callable[[Model], Outcome]] = {
    "acknowledged_jobs_terminal": acknowledged_jobs_terminal,
    "idempotent_enqueue": idempotent_enqueue,
    "single_success_per_generation": single_success_per_generation,
    "no_stale_result_accepted": no_stale_result_accepted,
    "executions_match_attempts": executions_match_attempts,
    "attempts_exclusive": attempts_exclusive,
    "handler_calls_granted": handler_calls_granted,
    "lease_recovered_in_time": lease_recovered_in_time,
    "silenced_worker_recovered": silenced_worker_recovered,
    "retry_delay_within_bounds": retry_delay_within_bounds,
    "terminal_state_consistent": terminal_state_consistent,
    "cancel_respected": cancel_respected,
    "queue_rate_respected": queue_rate_respected,
    "concurrency_key_kept": concurrency_key_kept,
    "key_limit_respected": key_limit_respected,
    "queue_limit_respected": queue_limit_respected,
}


# -- the report -------------------------------------------------------------------------


@dataclass
class Report:
    header: dict[str, Any]
    results: dict[str, Outcome]
    operations: Counter[str]
    faults: Counter[str]

    @property
    def violations(self) -> list[Violation]:
        return [v for result in self.results.values() for v in result.violations]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self, *, max_violations: int = 20) -> str:
        header = self.header
        title = ", ".join(
            f"{key} {header[key]}"
            for key in ("engine", "seed", "fault_seconds", "lease_ms", "maintenance_ms", "slack_ms")
            if key in header
        )
        lines = [f"chaos history ({title})"]
        lines.append(
            f"  operations: {sum(self.operations.values())} ("
            + ", ".join(f"{kind} {count}" for kind, count in sorted(self.operations.items()))
            + ")"
        )
        faults = ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items())) or "none"
        lines.append(f"  faults injected: {sum(self.faults.values())} ({faults})")
        lines.append("  invariants:")
        for name, result in self.results.items():
            extra = f", {result.unverified} undecidable" if result.unverified else ""
            notes = f"; {'; '.join(result.notes)}" if result.notes else ""
            status = "ok" if not result.violations else f"{len(result.violations)} VIOLATED"
            lines.append(f"    {name}: {result.checked} checked{extra}: {status}{notes}")
        log_errors = header.get("log_errors") or {}
        if log_errors:
            lines.append(
                f"  process log errors (not checked): {sum(log_errors.values())} lines, "
                f"{len(log_errors)} kinds; most frequent:"
            )
            lines.extend(f"    {count} x {message}" for message, count in list(log_errors.items())[:6])
        violations = self.violations
        lines.append(f"  violations: {len(violations)}")
        lines.extend(f"    {v}" for v in violations[:max_violations])
        if len(violations) > max_violations:
            lines.append(f"    ... and {len(violations) - max_violations} more")
        return "\n".join(lines)


OPERATION_KINDS = {
    "enqueue": "enqueue batches acked",
    "start": "handler calls",
    "finish": "handler ends",
    "ack": "result acks",
    "poll": "lease polls",
    "cancel": "cancels",
    "retry": "manual retries",
    "final_job": "jobs read back",
    "final_attempt": "attempts read back",
    "enqueue_cancelled": "enqueues answered CANCELLED (a known finding)",
}


def count_operations(events: Iterable[Event]) -> Counter[str]:
    operations: Counter[str] = Counter()
    for event in events:
        kind = event.get("kind")
        if kind in OPERATION_KINDS:
            operations[OPERATION_KINDS[kind]] += 1
            if kind == "enqueue":
                operations["jobs acked"] += len(event["ids"])
            elif kind == "ack":
                operations[f"acks {event['status']}"] += 1
    return operations


def check(history: History, invariants: Iterable[str] | None = None) -> Report:
    """Runs the invariants (all by default) over ``history``."""
    model = Model(history)
    names = list(invariants) if invariants is not None else list(INVARIANTS)
    results = {name: INVARIANTS[name](model) for name in names}
    faults = Counter(str(event.get("fault")) for event in model.fault_events)
    return Report(history.header, results, count_operations(history.events), faults)

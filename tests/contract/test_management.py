"""Cancel (R-8), manual retry (R-9), the audited reveal (R-22), tokens (R-20) and the
audit log, against the store on both engines."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import ALL_SCOPES, Actor, Principal, Scope
from coordinator.domain.records import AuditEvent, TokenRecord
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import FailedPrecondition, InvalidArgument, NotFound
from coordinator.service.audit import AuditLog
from coordinator.service.manage import ManagementService
from coordinator.service.tokens import TokenService, hash_token, parse_token
from coordinator.service.work import HeartbeatRequest, WorkBatch
from coordinator.store import StoreError
from coordinator.store.engine import create_write_engine

from .harness import LEASE_MS, SECOND, Harness

OPERATOR = Actor(
    Principal("0123456789abcdef", "ops", frozenset({Scope.MANAGE, Scope.REVEAL})), "ipv4:10.1.2.3:5"
)
MISSING_ID = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


@pytest.fixture
def manage(harness: Harness) -> ManagementService:
    return ManagementService(harness.store, harness.clock)


@pytest.fixture
def tokens(harness: Harness) -> TokenService:
    return TokenService(harness.store, harness.clock, cache_ttl_s=60)


def events(harness: Harness, target: str | None = None) -> list[AuditEvent]:
    return harness.store.list_audit_events(action=None, target=target, before_id=None, limit=1_000)


# -- cancel (R-8) ----------------------------------------------------------------------


@pytest.mark.parametrize("run_at_offset_ms", [0, 60 * SECOND], ids=["available", "scheduled"])
def test_r8_cancel_ends_a_queued_job_at_once_and_is_audited(
    harness: Harness, manage: ManagementService, run_at_offset_ms: int
) -> None:
    job_id = harness.enqueue(run_at_ms=harness.clock.now_ms() + run_at_offset_ms)

    cancelled = manage.cancel(job_id, OPERATOR)

    assert cancelled.effects.cancel_pushes == []
    job = harness.job(job_id)
    assert (job.state, job.last_error_code, job.finished_at_ms) == (
        JobState.CANCELLED,
        "cancelled",
        harness.clock.now_ms(),
    )
    assert cancelled.job == job
    assert harness.transitions(job_id)[-1]["to_state"] == "cancelled"
    [event] = events(harness)
    assert (event.action, event.target, event.actor_token_id, event.actor_name, event.peer) == (
        "job.cancel",
        job_id,
        "0123456789abcdef",
        "ops",
        "ipv4:10.1.2.3:5",
    )
    assert harness.claim() == []  # nothing left to run


def test_r8_cancel_of_a_reserved_job_ends_its_unstarted_attempt(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)

    manage.cancel(job_id, OPERATOR)

    assert harness.job(job_id).state is JobState.CANCELLED
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.execution_number, attempt.started_at_ms) == (Outcome.CANCELLED, 0, None)
    assert not harness.start(claimed.attempt_id).granted  # the worker is refused the start
    lost, _ = harness.heartbeat([claimed.attempt_id])
    assert lost == {claimed.attempt_id}


def test_r8_cancel_of_a_running_job_flags_it_and_names_the_worker_to_tell(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id, worker_id="worker-7")

    cancelled = manage.cancel(job_id, OPERATOR)

    pushes = [(push.worker_id, push.attempt_id) for push in cancelled.effects.cancel_pushes]
    assert pushes == [("worker-7", claimed.attempt_id)]
    job = harness.job(job_id)
    assert (job.state, job.cancel_requested) == (JobState.RUNNING, True)
    # The heartbeat answer repeats the cancel (a worker on another replica hears it too).
    answers = harness.ops.process(
        WorkBatch(
            heartbeats=[HeartbeatRequest([claimed.attempt_id], LEASE_MS, harness.holder(claimed.attempt_id))]
        )
    )
    assert answers.lost == [set()] and answers.cancels == [{claimed.attempt_id}]

    ack = harness.report(claimed.attempt_id, Outcome.CANCELLED, error_code="cancelled")

    assert (ack.accepted, ack.job_state) == (True, JobState.CANCELLED)
    assert harness.job(job_id).state is JobState.CANCELLED


def test_r8_a_cancelled_run_that_fails_anyway_is_not_retried(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    manage.cancel(job_id, OPERATOR)

    harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE, error_code="ValueError")

    job = harness.job(job_id)
    assert (job.state, job.last_error_code) == (JobState.CANCELLED, "cancelled")
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.error_code) == (Outcome.RETRYABLE_FAILURE, "ValueError")


def test_r8_worker_gone_the_job_ends_cancelled_when_its_lease_lapses(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    harness.run(job_id)
    manage.cancel(job_id, OPERATOR)

    answers = harness.lapse(LEASE_MS)

    assert answers.terminal_job_ids == {job_id}
    job = harness.job(job_id)
    assert (job.state, job.executions, job.last_error_code) == (JobState.CANCELLED, 1, "cancelled")
    assert [a.outcome for a in harness.attempts(job_id)] == [Outcome.ABANDONED]
    harness.clock.advance(3_600 * SECOND)
    assert harness.claim() == []  # never retried


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.PERMANENT_FAILURE])
def test_r8_cancel_of_a_terminal_job_is_refused_and_changes_nothing(
    harness: Harness, manage: ManagementService, outcome: Outcome
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.report(claimed.attempt_id, outcome)
    before = harness.snapshot(job_id)

    with pytest.raises(FailedPrecondition, match="already"):
        manage.cancel(job_id, OPERATOR)

    assert harness.snapshot(job_id) == before
    assert events(harness) == []


def test_cancel_and_retry_name_bad_and_unknown_ids(manage: ManagementService, harness: Harness) -> None:
    with pytest.raises(InvalidArgument, match="not a UUID"):
        manage.cancel("nope", OPERATOR)
    with pytest.raises(NotFound):
        manage.retry(MISSING_ID, OPERATOR)
    assert events(harness) == []


# -- manual retry (R-9) ----------------------------------------------------------------


def test_r9_retry_of_a_failed_job_starts_a_new_generation_with_fresh_budgets(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue(settings=SettingsLayer(max_executions=1))
    first = harness.run(job_id)
    harness.report(first.attempt_id, Outcome.RETRYABLE_FAILURE, error_code="Boom")
    assert harness.job(job_id).state is JobState.FAILED
    harness.clock.advance(5 * SECOND)

    retried = manage.retry(job_id, OPERATOR).job

    now = harness.clock.now_ms()
    assert (retried.state, retried.generation, retried.executions, retried.unstarted_streak) == (
        JobState.AVAILABLE,
        2,
        0,
        0,
    )
    assert (retried.run_at_ms, retried.finished_at_ms, retried.last_error_code) == (now, None, None)
    second = harness.run(job_id)
    assert (second.job.generation, harness.start(second.attempt_id).execution_number) == (2, 1)
    harness.report(second.attempt_id, Outcome.SUCCEEDED, output=b"ok")
    attempts = harness.attempts(job_id)
    assert [(a.generation, a.execution_number, a.outcome) for a in attempts] == [
        (1, 1, Outcome.RETRYABLE_FAILURE),
        (2, 1, Outcome.SUCCEEDED),
    ]
    assert [e.action for e in events(harness, job_id)] == ["job.retry"]


def test_r9_a_cancelled_job_can_be_retried_and_its_flag_is_cleared(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    harness.run(job_id)
    manage.cancel(job_id, OPERATOR)
    harness.lapse(LEASE_MS)

    retried = manage.retry(job_id, OPERATOR).job

    assert (retried.state, retried.cancel_requested, retried.generation) == (JobState.AVAILABLE, False, 2)


@pytest.mark.parametrize("state", ["available", "reserved", "running", "succeeded"])
def test_r9_retry_in_other_states_is_refused_and_changes_nothing(
    harness: Harness, manage: ManagementService, state: str
) -> None:
    job_id = harness.enqueue()
    if state != "available":
        claimed = harness.claim_one(job_id)
        if state != "reserved":
            harness.start(claimed.attempt_id)
        if state == "succeeded":
            harness.report(claimed.attempt_id)
    before = harness.snapshot(job_id)

    with pytest.raises(FailedPrecondition, match=f"it is {state}; only failed or cancelled"):
        manage.retry(job_id, OPERATOR)

    assert harness.snapshot(job_id) == before
    assert events(harness) == []


# -- reveal (R-22) ---------------------------------------------------------------------


def test_r22_a_reveal_returns_the_text_and_writes_exactly_one_event(
    harness: Harness, manage: ManagementService
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.report(
        claimed.attempt_id,
        Outcome.PERMANENT_FAILURE,
        error_code="card_declined",
        exception_type="billing.CardError",
        message="card 4242 declined",
        detail="Traceback ...\nbilling.CardError: card 4242 declined",
    )

    attempt = manage.reveal_error(claimed.attempt_id, OPERATOR)

    assert (attempt.message, attempt.exception_type) == ("card 4242 declined", "billing.CardError")
    assert attempt.detail is not None and "Traceback" in attempt.detail
    [event] = events(harness)
    assert (event.action, event.target, event.actor_name, event.peer) == (
        "attempt.reveal_error",
        claimed.attempt_id,
        "ops",
        "ipv4:10.1.2.3:5",
    )
    assert "4242" not in (event.detail or "")  # the log says what was revealed, never the text


def test_r22_a_reveal_of_an_unknown_attempt_writes_no_event(
    harness: Harness, manage: ManagementService
) -> None:
    with pytest.raises(NotFound):
        manage.reveal_error(MISSING_ID, OPERATOR)
    with pytest.raises(InvalidArgument):
        manage.reveal_error("x'; DROP TABLE attempts; --", OPERATOR)
    assert events(harness) == []


# -- tokens and the audit log ---------------------------------------------------


def test_r20_tokens_are_stored_as_hashes_only(harness: Harness, tokens: TokenService) -> None:
    bootstrap = tokens.bootstrap()
    created = tokens.create("billing worker", ["work"], ["billing"], OPERATOR)

    assert bootstrap is not None and tokens.bootstrap() is None  # only on an empty table
    secrets = [bootstrap, created.token, created.token.split("_", 2)[2], bootstrap.split("_", 2)[2]]
    engine = create_write_engine(harness.store.url)
    try:
        with engine.connect() as conn:
            cells = [str(cell) for row in conn.execute(text("SELECT * FROM tokens")) for cell in row]
            cells += [str(cell) for row in conn.execute(text("SELECT * FROM audit_events")) for cell in row]
    finally:
        engine.dispose()
    assert len(cells) > 0
    assert not [cell for cell in cells for secret in secrets if secret in cell]
    assert hash_token(created.token) in cells and parse_token(created.token) == created.record.id


def test_r20_authentication_checks_the_hash_and_revocation(harness: Harness, tokens: TokenService) -> None:
    created = tokens.create("reader", ["read", "enqueue"], [], OPERATOR)
    forged = created.token[:-4] + ("AAAA" if not created.token.endswith("AAAA") else "BBBB")

    principal = tokens.authenticate(created.token)

    assert principal is not None and principal.scopes == {Scope.READ, Scope.ENQUEUE}
    assert (principal.token_id, principal.name, principal.queues) == (created.record.id, "reader", None)
    assert tokens.authenticate(forged) is None
    assert tokens.cached_principal(forged) == (True, None)
    assert tokens.authenticate("rwk_not_a_token") is None
    tokens.revoke(created.record.id, OPERATOR)
    assert tokens.cached_principal(created.token) == (False, None)  # evicted at once
    assert tokens.authenticate(created.token) is None
    assert [e.action for e in events(harness, created.record.id)] == ["token.revoke", "token.create"]
    with pytest.raises(FailedPrecondition, match="already revoked"):
        tokens.revoke(created.record.id, OPERATOR)
    assert [t.id for t in tokens.list(include_revoked=False)] == []
    assert [t.id for t in tokens.list(include_revoked=True)] == [created.record.id]


def test_r21_token_creation_checks_scopes_queues_and_names(tokens: TokenService) -> None:
    with pytest.raises(InvalidArgument, match="unknown scope 'root'"):
        tokens.create("x", ["root"], [], OPERATOR)
    with pytest.raises(InvalidArgument, match="at least one scope"):
        tokens.create("x", [], [], OPERATOR)
    with pytest.raises(InvalidArgument, match="work or enqueue scope only"):
        tokens.create("x", ["read"], ["billing"], OPERATOR)
    with pytest.raises(InvalidArgument, match="queues"):
        tokens.create("x", ["work"], ["bad queue"], OPERATOR)
    with pytest.raises(InvalidArgument, match="name"):
        tokens.create("", ["work"], [], OPERATOR)
    worker = tokens.create("w", ["WORK"], ["billing", "emails"], OPERATOR).record
    assert (worker.scopes, worker.queues) == ({Scope.WORK}, {"billing", "emails"})
    admin = tokens.create("all", [s.value for s in ALL_SCOPES], [], OPERATOR).record
    assert admin.scopes == ALL_SCOPES


def test_r22_the_audit_log_is_append_only_in_the_database(harness: Harness, tokens: TokenService) -> None:
    tokens.create("x", ["read"], [], OPERATOR)
    # The store has no operation that changes an event; the database itself refuses, to
    # anyone holding a connection.
    engine = create_write_engine(harness.store.url)
    try:
        for statement in ("UPDATE audit_events SET actor_name = 'someone else'", "DELETE FROM audit_events"):
            with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
                conn.execute(text(statement))
    finally:
        engine.dispose()
    assert [e.actor_name for e in events(harness)] == ["ops"]


def test_the_audit_log_cannot_be_emptied_at_once_either(harness: Harness, tokens: TokenService) -> None:
    """PostgreSQL's TRUNCATE fires no row trigger; SQLite's form of it, DELETE without a
    WHERE, is refused by the row trigger."""
    tokens.create("x", ["read"], [], OPERATOR)
    statement = "TRUNCATE audit_events" if harness.store.postgres else "DELETE FROM audit_events"
    engine = create_write_engine(harness.store.url)
    try:
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()
    assert [e.actor_name for e in events(harness)] == ["ops"]


def test_the_audit_log_pages_newest_first(harness: Harness, tokens: TokenService) -> None:
    created = [tokens.create(f"t{n}", ["read"], [], OPERATOR).record.id for n in range(5)]
    log = AuditLog(harness.store, CoordinatorConfig())

    first, token = log.list(action="token.create", target=None, page_size=3, page_token="")
    second, last = log.list(action="token.create", target=None, page_size=3, page_token=token)

    assert [e.target for e in first + second] == created[::-1]
    assert last == ""
    assert log.list(action=None, target=created[0], page_size=0, page_token="")[0][0].target == created[0]
    with pytest.raises(InvalidArgument, match="page_token"):
        log.list(action=None, target=None, page_size=0, page_token="abc")


def test_r22_a_failed_statement_does_not_carry_the_values_it_wrote(harness: Harness) -> None:
    """Exceptions (and the log lines that print them) never show statement parameters."""
    secret = "card 4242 in a message"
    token = TokenRecord("00000000000000aa", secret, secret, frozenset({Scope.READ}), None, 0, None, None)
    with pytest.raises(StoreError) as failed, harness.store.write() as tx:
        for _ in range(2):  # the same primary key twice
            tx.insert_token(token)
    cause = failed.value.__cause__
    assert cause is not None and "parameters hidden" in str(cause)
    assert secret not in str(failed.value) + str(cause)

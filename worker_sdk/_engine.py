"""The worker side of the protocol: what to send, and what to do with what arrives.

Everything here runs on the worker's event loop, one message at a time, so the state
(``RunTable``) needs no locks. Sending never blocks: a message that cannot go out because
the stream is down is dropped, and everything that matters is replayed by ``on_ready``
on the next stream (unacknowledged results, pending starts and releases, credit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from datetime import timedelta

from worker_sdk import _identity
from worker_sdk._config import WorkerConfig
from worker_sdk._context import CAUSE_CANCELLED, CAUSE_LOST, CAUSE_SHUTDOWN, JobContext
from worker_sdk._convert import duration, optional_timedelta, result_message
from worker_sdk._heartbeat import Heartbeater
from worker_sdk._logging import job_log_context
from worker_sdk._metrics import NO_RESULT, WorkerMetrics
from worker_sdk._middleware import Middleware
from worker_sdk._pipeline import (
    CODE_OUTPUT_TOO_LARGE,
    CODE_WORKER_SHUTDOWN,
    HandlerDef,
    PipelineRun,
    RunReport,
    execute,
)
from worker_sdk._pipeline import report_exception as _report_exception
from worker_sdk._results import Outcome
from worker_sdk._runs import Phase, Run, RunTable
from worker_sdk._session import Session
from worker_sdk._timers import REAL_TIMERS, Timers
from worker_sdk._tracing import load as load_tracing
from worker_sdk._tracing import run_span
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

logger = logging.getLogger(__name__)

REJECTED_OUTPUT_TOO_LARGE = "OUTPUT_TOO_LARGE"
"""The ResultAck reason of a success whose output is over the coordinator's limit."""
_PIPELINE_SLACK_S = 1.0
"""Extra wait for interrupted pipelines beyond the grace (they return within it)."""


class Engine:
    """Drives one worker's claims through the protocol (see worker_service.proto)."""

    def __init__(
        self,
        config: WorkerConfig,
        handlers: Mapping[str, HandlerDef],
        middleware: Sequence[Middleware],
        executor: Executor,
        metrics: WorkerMetrics | None = None,
        timers: Timers = REAL_TIMERS,
    ) -> None:
        self._config = config
        self._timers = timers
        self._lease_s = config.lease.total_seconds()
        self._metrics = metrics
        self._handlers = dict(handlers)
        self._middleware = tuple(middleware)
        self._executor = executor
        self.table = RunTable(config.concurrency)
        self.table.clock = timers.monotonic
        load_tracing()  # imports OpenTelemetry, when installed, now rather than in the first run
        self._session: Session | None = None
        self.heartbeater = Heartbeater(
            self.table,
            interval=config.heartbeat_interval,
            lease=config.lease,
            send=self._send,
            on_silence=self._restart_stream,
            metrics=metrics,
            timers=timers,
        )
        self._draining = False
        self._drain_deadline: float | None = None
        """Loop time until which a drain lets authorized runs go on."""
        self._stopping = False
        self._coordinator_drain: asyncio.Task[None] | None = None

    def attach(self, session: Session) -> None:
        """Sets the session messages go out on."""
        self._session = session

    # -- StreamHandler ------------------------------------------------------------------

    def hello(self) -> pb.ConnectRequest:
        """The Hello opening every stream."""
        config = self._config
        return pb.ConnectRequest(
            hello=pb.Hello(
                worker_id=config.worker_id,
                queues=list(config.queues),
                wire_names=sorted(self._handlers),
                capacity=config.concurrency,
                lease=duration(config.lease),
                batches=True,
                host=_identity.host(),
                sdk=_identity.sdk(),
            )
        )

    def on_ready(self, welcome: pb.Welcome) -> None:
        """Replays what the previous stream may have lost, then offers credit."""
        self.table.credit_outstanding = 0
        self.heartbeater.reset()
        for message in self.table.unacked.values():
            self._send(message)
        for run in self.table.in_phase(Phase.STARTING):
            self._send(pb.ConnectRequest(start=pb.StartRequest(attempt_id=run.attempt_id)))
        for run in self.table.in_phase(Phase.RELEASING):
            self._send(pb.ConnectRequest(release=pb.Release(attempt_id=run.attempt_id)))
        self._replenish()
        self.heartbeater.beat()

    def on_closed(self) -> None:
        """Credit dies with its stream."""
        self.table.credit_outstanding = 0
        self.heartbeater.reset()

    def on_message(self, message: pb.ConnectResponse) -> None:
        """Dispatches one coordinator message."""
        kind = message.WhichOneof("kind")
        if kind == "batch":
            self._on_batch(message.batch)
        elif kind == "assignment":
            self._on_assignment(message.assignment)
        elif kind == "start_answer":
            self._on_start_answer(message.start_answer)
        elif kind == "heartbeat_answer":
            self._on_heartbeat_answer(message.heartbeat_answer)
        elif kind == "result_ack":
            self._on_result_ack(message.result_ack)
        elif kind == "cancel":
            self._on_cancel(message.cancel)
        elif kind == "drain":
            self._on_drain(message.drain)
        else:
            logger.debug("ignoring coordinator message of kind %s", kind)
        self.table.notify()

    # -- messages -----------------------------------------------------------------------

    def _on_batch(self, batch: pb.CoordinatorBatch) -> None:
        """A CoordinatorBatch: each item as if it had come on its own, in the protocol's order."""
        for assignment in batch.assignments:
            self._on_assignment(assignment)
        for answer in batch.start_answers:
            self._on_start_answer(answer)
        for ack in batch.result_acks:
            self._on_result_ack(ack)
        for cancel in batch.cancels:
            self._on_cancel(cancel)

    def _on_assignment(self, assignment: pb.Assignment) -> None:
        table = self.table
        table.credit_outstanding = max(0, table.credit_outstanding - 1)
        attempt_id = assignment.attempt_id
        if table.known(attempt_id):
            logger.debug("duplicate assignment for attempt %s ignored", attempt_id)
            return
        if assignment.wire_name not in self._handlers:
            logger.error(
                "assigned job %s of wire name %r, which has no handler here; releasing it",
                assignment.job_id,
                assignment.wire_name,
            )
            self._send(pb.ConnectRequest(release=pb.Release(attempt_id=attempt_id)))
            return
        if self._draining:
            self._send(pb.ConnectRequest(release=pb.Release(attempt_id=attempt_id)))
            return
        # The coordinator granted the lease we asked for when it claimed the job, a moment
        # before this arrived: measured from here, on our own clock, whatever the skew.
        table.runs[attempt_id] = Run(assignment, lease_deadline=table.clock() + self._lease_s)
        self._send(pb.ConnectRequest(start=pb.StartRequest(attempt_id=attempt_id)))

    def _on_start_answer(self, answer: pb.StartAnswer) -> None:
        run = self.table.runs.get(answer.attempt_id)
        if run is None or run.phase is Phase.RUNNING:
            return
        if not answer.granted:
            logger.info(
                "start of attempt %s refused (%s)",
                answer.attempt_id,
                answer.reason or "no reason",
                extra=_ids(run),
            )
            del self.table.runs[run.attempt_id]
            self._replenish()
            return
        if self._lease_lapsed(run):
            self._finish(run, None)
            return
        if run.phase is Phase.RELEASING:
            # Granted before our Release arrived: the execution is charged. Inside the drain
            # window it runs like any other run (R-12 lets running handlers finish);
            # after it, say why it ends without calling the handler.
            loop_time = asyncio.get_running_loop().time()
            if self._drain_deadline is None or loop_time >= self._drain_deadline:
                self._finish(run, RunReport(Outcome.INTERRUPTED, error_code=CODE_WORKER_SHUTDOWN))
                return
        run.phase = Phase.RUNNING
        run.ctx = self._context(run.assignment, answer.execution_number)
        if run.cancel_requested:
            run.ctx._cancel(CAUSE_CANCELLED)
        run.task = asyncio.create_task(self._execute(run), name=f"runwick-run-{run.attempt_id}")

    def _on_heartbeat_answer(self, answer: pb.HeartbeatAnswer) -> None:
        self.heartbeater.answered(answer.lost_attempt_ids)
        for attempt_id in answer.lost_attempt_ids:
            run = self.table.runs.get(attempt_id)
            if run is None or run.lost:
                continue
            logger.warning(
                "coordinator no longer recognises attempt %s; cancelling it", attempt_id, extra=_ids(run)
            )
            if run.phase is Phase.RUNNING and run.ctx is not None:
                run.lost = True
                run.ctx._cancel(CAUSE_LOST)
            else:
                del self.table.runs[attempt_id]
        self._replenish()

    def _on_result_ack(self, ack: pb.ResultAck) -> None:
        sent = self.table.unacked.pop(ack.attempt_id, None)
        if sent is None:
            return
        if ack.status == pb.ResultAck.STATUS_STALE:
            logger.info("result of attempt %s was stale (superseded attempt)", ack.attempt_id)
        elif ack.status == pb.ResultAck.STATUS_REJECTED:
            if ack.reason == REJECTED_OUTPUT_TOO_LARGE and sent.result.outcome == job_pb2.OUTCOME_SUCCEEDED:
                # docs/limits.md: the coordinator's max_output_bytes is below this worker's; the
                # job fails permanently with output_too_large, as if the SDK had caught it.
                logger.warning(
                    "attempt %s: output over the coordinator's limit; reporting %s",
                    ack.attempt_id,
                    CODE_OUTPUT_TOO_LARGE,
                )
                report = RunReport(
                    Outcome.PERMANENT_FAILURE, error_code=CODE_OUTPUT_TOO_LARGE, message=ack.message
                )
                replacement = result_message(ack.attempt_id, report)
                self.table.unacked[ack.attempt_id] = replacement
                self._send(replacement)
                return
            # Resending the same result cannot succeed: drop it; the lease lapses.
            logger.error("result of attempt %s rejected (%s): %s", ack.attempt_id, ack.reason, ack.message)
        self._replenish()

    def _on_cancel(self, cancel: pb.Cancel) -> None:
        run = self.table.runs.get(cancel.attempt_id)
        # The coordinator repeats a cancel with each heartbeat answer until the run ends.
        if run is None or run.cancel_requested or (run.ctx is not None and run.ctx.cancelled):
            return
        logger.info("attempt %s cancelled by the coordinator", cancel.attempt_id, extra=_ids(run))
        if run.ctx is not None:
            run.ctx._cancel(CAUSE_CANCELLED)
        else:
            run.cancel_requested = True

    def _on_drain(self, drain: pb.Drain) -> None:
        if self._stopping or self._coordinator_drain is not None:
            return
        deadline = optional_timedelta(drain, "deadline")
        timeout = self._config.drain_timeout
        if deadline is not None:
            timeout = min(timeout, deadline)
        logger.info("coordinator asked to drain within %.3f s", timeout.total_seconds())
        self._coordinator_drain = asyncio.create_task(self._drain_for_coordinator(timeout))

    # -- runs ---------------------------------------------------------------------------

    def _context(self, assignment: pb.Assignment, execution_number: int) -> JobContext:
        return JobContext(
            job_id=assignment.job_id,
            attempt_id=assignment.attempt_id,
            wire_name=assignment.wire_name,
            queue=assignment.queue,
            execution_number=execution_number or assignment.execution_number,
            max_executions=assignment.max_executions,
            generation=assignment.generation,
            parent_outputs={parent.job_id: parent.output for parent in assignment.parent_outputs},
        )

    def _lease_lapsed(self, run: Run) -> bool:
        """True, logged and counted, when the run's lease is over by the worker's clock.

        Then the coordinator has recorded the attempt abandoned (or will at its next
        expiry pass) and may run the job elsewhere: the handler must not be called, and
        no result is sent (the coordinator ended the attempt itself).
        """
        overdue_s = self.table.clock() - run.lease_deadline
        if overdue_s < 0:
            return False
        assignment = run.assignment
        logger.warning(
            "attempt %s: lease lapsed %.3f s before the handler could start (was the process "
            "paused?); not running it, the coordinator recovers the job",
            run.attempt_id,
            overdue_s,
            extra=_ids(run),
        )
        if self._metrics is not None:
            self._metrics.lease_lapsed_starts.labels(assignment.queue, assignment.wire_name).inc()
        return True

    async def _execute(self, run: Run) -> None:
        assert run.ctx is not None
        if self._lease_lapsed(run):  # the last check before the pipeline calls the handler
            self._finish(run, None)
            return
        assignment = run.assignment
        pipeline_run = PipelineRun(
            handler=self._handlers[assignment.wire_name],
            ctx=run.ctx,
            payload=assignment.payload,
            payload_version=assignment.payload_version,
            middleware=self._middleware,
            execution_timeout=optional_timedelta(assignment, "execution_timeout"),
            cancellation_grace=self._config.cancellation_grace,
            max_output_bytes=self._config.max_output_bytes,
            executor=self._executor,
            timers=self._timers,
        )
        in_flight = None
        if self._metrics is not None:
            in_flight = self._metrics.run_in_flight(assignment.queue, assignment.wire_name)
            in_flight.inc()
        started = asyncio.get_running_loop().time()
        # Every log line of the run (middleware, handler threads too) names its job, and
        # its span when the run is traced (the span is current for the handler too).
        with (
            run_span(assignment, run.ctx) as span,
            job_log_context(
                span.log_fields,
                job_id=assignment.job_id,
                attempt_id=assignment.attempt_id,
                wire_name=assignment.wire_name,
                queue=assignment.queue,
            ),
        ):
            try:
                report = await execute(pipeline_run)
            except Exception as error:  # a bug in the pipeline must not kill the worker
                logger.error("pipeline failed for attempt %s (%s)", run.attempt_id, type(error).__name__)
                report = _report_exception(error)
            finally:
                if in_flight is not None:
                    in_flight.dec()
            if run.lost:
                report = None
            span.finished(report)
        if self._metrics is not None:
            outcome = NO_RESULT if report is None else report.outcome.value
            elapsed = asyncio.get_running_loop().time() - started
            self._metrics.run_finished(assignment.queue, assignment.wire_name, outcome, elapsed)
        self._finish(run, report)

    def _finish(self, run: Run, report: RunReport | None) -> None:
        table = self.table
        table.runs.pop(run.attempt_id, None)
        if report is not None:
            message = result_message(run.attempt_id, report)
            table.unacked[run.attempt_id] = message
            self._send(message)
            logger.debug(
                "attempt %s finished: %s %s",
                run.attempt_id,
                report.outcome,
                report.error_code,
                extra=_ids(run),
            )
        self._replenish()
        table.notify()

    # -- credit, drain ------------------------------------------------------------------

    def _send(self, message: pb.ConnectRequest) -> bool:
        return self._session is not None and self._session.send(message)

    def _restart_stream(self) -> None:
        if self._session is not None:
            self._session.restart()

    def _replenish(self) -> None:
        if self._draining:
            return
        count = self.table.credit_to_send()
        if count > 0 and self._send(pb.ConnectRequest(credit=pb.Credit(count=count))):
            self.table.credit_outstanding += count

    async def drain(self, within: timedelta, *, stopping: bool) -> None:
        """Drains (R-12): no more credit, release unstarted claims, let runs finish
        ``within`` the given time, interrupt the rest, and wait (bounded) for the last acks.
        """
        self._stopping = self._stopping or stopping
        self._draining = True
        self._drain_deadline = asyncio.get_running_loop().time() + within.total_seconds()
        table = self.table
        for run in table.in_phase(Phase.STARTING):
            run.phase = Phase.RELEASING
            self._send(pb.ConnectRequest(release=pb.Release(attempt_id=run.attempt_id)))
        table.notify()

        def nothing_running() -> bool:
            return not table.in_phase(Phase.RUNNING)

        def nothing_running_or_awaiting_start() -> bool:
            # A released claim may still be granted (the coordinator charged it first):
            # it then runs within this window, so wait for its answer too.
            return nothing_running() and not table.in_phase(Phase.RELEASING)

        if not await table.wait_until(nothing_running_or_awaiting_start, within.total_seconds()):
            running = table.in_phase(Phase.RUNNING)
            logger.warning("interrupting %d run(s) still going after the drain timeout", len(running))
            for run in running:
                if run.ctx is not None:
                    run.ctx._cancel(CAUSE_SHUTDOWN)
            grace_s = self._config.cancellation_grace.total_seconds() + _PIPELINE_SLACK_S
            await table.wait_until(nothing_running, grace_s)

        def settled() -> bool:
            return not table.unacked and not table.in_phase(Phase.RELEASING)

        if not await table.wait_until(settled, self._config.ack_timeout.total_seconds()):
            logger.warning(
                "%d result(s) unacknowledged after draining; the coordinator recovers those jobs",
                len(table.unacked),
            )
        for run in table.in_phase(Phase.RELEASING):
            del table.runs[run.attempt_id]

    async def _drain_for_coordinator(self, within: timedelta) -> None:
        generation = self._session.generation if self._session is not None else 0
        try:
            await self.drain(within, stopping=False)
        finally:
            self._coordinator_drain = None
        if self._stopping:
            return
        self._draining = False
        self._drain_deadline = None
        if self._session is not None and self._session.generation == generation:
            self._session.restart()
        else:
            self._replenish()

    async def close(self) -> None:
        """Stops a coordinator-requested drain still in progress."""
        task = self._coordinator_drain
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})


def _ids(run: Run) -> dict[str, str]:
    """Log ``extra`` naming a run's job and attempt (structured logs carry them as fields)."""
    return {"job_id": run.assignment.job_id, "attempt_id": run.attempt_id}

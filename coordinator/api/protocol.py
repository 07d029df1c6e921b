"""The worker stream's wire form: decoding ConnectRequests, and framing what the
dispatcher delivers to a session into ConnectResponses: one message per item
(``frame``), or batches for a worker that reads them (``frame_batched``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from coordinator.api.convert import (
    PB_TO_OUTCOME,
    duration,
    duration_ms,
    set_timestamp,
    state_to_pb,
    timestamp,
)
from coordinator.api.errors import MAX_STATUS_MESSAGE_BYTES
from coordinator.dispatch.deliveries import Assignments, CancelNotice, Delivery, DrainNotice
from coordinator.domain.lifecycle import Report
from coordinator.domain.states import WORKER_OUTCOMES
from coordinator.errors import InvalidArgument
from coordinator.service.work import Claimed, HeartbeatAnswer, ResultAnswer, ResultReport, StartAnswer
from worker_sdk.grammar import TRUNCATION_MARKER, truncate_utf8
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

Message = pb.ConnectResponse


def result_report(result: pb.Result) -> ResultReport:
    """Raises InvalidArgument for an outcome a worker may not report or a bad delay."""
    outcome = PB_TO_OUTCOME.get(result.outcome)
    if outcome not in WORKER_OUTCOMES or outcome is None:
        raise InvalidArgument(
            "result.outcome",
            f"a worker cannot report outcome {result.outcome}; report one of "
            + ", ".join(sorted(f"OUTCOME_{o.name}" for o in WORKER_OUTCOMES)),
            reason="UNKNOWN_ENUM",
        )
    retry_delay = None
    if result.HasField("retry_delay"):
        retry_delay = duration_ms(result.retry_delay, "result.retry_delay")
    report = Report(
        outcome=outcome,
        error_code=result.error_code,
        exception_type=result.exception_type[:512],
        message=result.message,
        detail=result.detail,
        explicit_retry_delay_ms=retry_delay,
    )
    return ResultReport(result.attempt_id, report, bytes(result.output) if result.output else None)


def frame(delivery: Delivery) -> Iterator[Message]:
    """The messages that carry one delivery: one Assignment per claimed job, one
    message for anything else."""
    if isinstance(delivery, Assignments):
        for claimed in delivery.claimed:
            yield assignment(claimed)
    elif isinstance(delivery, StartAnswer):
        yield start_answer(delivery)
    elif isinstance(delivery, HeartbeatAnswer):
        yield heartbeat_answer(delivery)
    elif isinstance(delivery, ResultAnswer):
        yield result_ack(delivery)
    elif isinstance(delivery, CancelNotice):
        yield cancel(delivery.attempt_id, delivery.reason)
    elif isinstance(delivery, DrainNotice):
        yield drain(delivery.timeout_s)
    else:  # pragma: no cover - the Delivery union is closed
        raise TypeError(f"cannot frame {type(delivery).__name__}")


MAX_BATCH_PAYLOAD_BYTES = 1 << 20
"""About how many payload and output bytes one CoordinatorBatch carries before the
next begins, so a batch of large assignments stays below gRPC's default 4 MiB receive
limit, which third-party workers may keep."""


def frame_batched(deliveries: Iterable[Delivery]) -> Iterator[Message]:
    """The messages that carry ``deliveries``, in order, for a worker that reads
    CoordinatorBatch: assignments, start answers, result acks and cancels ride together;
    a heartbeat answer or a drain ends the batch before it and goes on its own."""
    message, size = _batch_message(), 0
    for delivery in deliveries:
        if isinstance(delivery, Assignments):
            for claimed in delivery.claimed:
                item_size = len(claimed.job.payload) + sum(map(len, claimed.parent_outputs.values()))
                if size and size + item_size > MAX_BATCH_PAYLOAD_BYTES:
                    yield message
                    message, size = _batch_message(), 0
                _fill_assignment(message.batch.assignments.add(), claimed)
                size += item_size
        elif isinstance(delivery, StartAnswer):
            _fill_start_answer(message.batch.start_answers.add(), delivery)
        elif isinstance(delivery, ResultAnswer):
            _fill_result_ack(message.batch.result_acks.add(), delivery)
        elif isinstance(delivery, CancelNotice):
            message.batch.cancels.add(attempt_id=delivery.attempt_id, reason=delivery.reason)
        else:
            if _has_items(message.batch):
                yield message
                message, size = _batch_message(), 0
            yield from frame(delivery)
    if _has_items(message.batch):
        yield message


def _batch_message() -> Message:
    return _message_with("batch")[0]


def _message_with(field: str) -> tuple[Message, Any]:
    """A new message with its ``field`` set and empty, and that field, to fill in place.
    Items are filled where they go (``batch.result_acks.add()``, or such a field):
    ``Message(batch=...)`` or appending a message built apart would copy it again."""
    message = Message()
    item = getattr(message, field)
    item.SetInParent()
    return message, item


def _has_items(batch: pb.CoordinatorBatch) -> bool:
    return bool(batch.assignments or batch.start_answers or batch.result_acks or batch.cancels)


def welcome(coordinator_id: str) -> Message:
    return Message(welcome=pb.Welcome(coordinator_id=coordinator_id, batches=True))


def start_answer(answer: StartAnswer) -> Message:
    message, item = _message_with("start_answer")
    _fill_start_answer(item, answer)
    return message


def _fill_start_answer(message: pb.StartAnswer, answer: StartAnswer) -> None:
    message.attempt_id = answer.attempt_id
    message.granted = answer.granted
    message.execution_number = answer.execution_number
    message.reason = answer.reason


def heartbeat_answer(answer: HeartbeatAnswer) -> Message:
    return Message(
        heartbeat_answer=pb.HeartbeatAnswer(
            lost_attempt_ids=sorted(answer.lost), lease_expires_at=timestamp(answer.lease_expires_at_ms)
        )
    )


def result_ack(answer: ResultAnswer) -> Message:
    message, item = _message_with("result_ack")
    _fill_result_ack(item, answer)
    return message


def _fill_result_ack(ack: pb.ResultAck, answer: ResultAnswer) -> None:
    """ACCEPTED, STALE (R-11) or REJECTED with the error's reason and metadata (docs/limits.md)."""
    ack.attempt_id = answer.attempt_id
    ack.status = pb.ResultAck.STATUS_ACCEPTED if answer.accepted else pb.ResultAck.STATUS_STALE
    if not answer.accepted:
        ack.message = truncate_utf8(answer.reason, MAX_STATUS_MESSAGE_BYTES, TRUNCATION_MARKER)
        ack.reason = "STALE"
    if answer.error is not None:
        ack.status = pb.ResultAck.STATUS_REJECTED
        ack.reason = answer.error.reason
        ack.metadata.update(answer.error.metadata)
    if answer.job_state is not None:
        ack.job_state = state_to_pb(answer.job_state)  # type: ignore[assignment]
    if answer.retry_delay_ms is not None:
        ack.retry_delay.CopyFrom(duration(answer.retry_delay_ms))


def assignment(claimed: Claimed) -> Message:
    message, item = _message_with("assignment")
    _fill_assignment(item, claimed)
    return message


def _fill_assignment(message: pb.Assignment, claimed: Claimed) -> None:
    job = claimed.job
    message.job_id = job.id
    message.attempt_id = claimed.attempt_id
    message.wire_name = job.wire_name
    message.queue = job.queue
    message.payload = job.payload
    message.payload_version = job.payload_version
    set_timestamp(message.lease_expires_at, claimed.lease_expires_at_ms)
    message.execution_number = job.executions + 1
    message.max_executions = job.max_executions
    message.generation = job.generation
    if job.execution_timeout_ms is not None:
        message.execution_timeout.CopyFrom(duration(job.execution_timeout_ms))
    traces = claimed.parent_trace_contexts
    for parent_id, output in sorted(claimed.parent_outputs.items()):
        parent = message.parent_outputs.add(job_id=parent_id, output=output)
        if parent_id in traces:
            traceparent, tracestate = traces[parent_id]
            parent.trace_context.traceparent = traceparent
            parent.trace_context.tracestate = tracestate or ""
    if job.traceparent is not None:
        message.trace_context.traceparent = job.traceparent
        message.trace_context.tracestate = job.tracestate or ""


def cancel(attempt_id: str, reason: str) -> Message:
    """R-8: asks the worker to cancel the handler's run of ``attempt_id``."""
    return Message(cancel=pb.Cancel(attempt_id=attempt_id, reason=reason))


def drain(timeout_s: float) -> Message:
    return Message(drain=pb.Drain(deadline=duration(int(timeout_s * 1000))))

"""The worker stream's wire form: decoding ConnectRequests, and framing what the
dispatcher delivers to a session into ConnectResponses: one message per item
(``frame``), or batches for a worker that reads them (``frame_batched``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from coordinator.api.convert import PB_TO_OUTCOME, duration, duration_ms, state_to_pb, timestamp
from coordinator.api.errors import MAX_STATUS_MESSAGE_BYTES
from coordinator.dispatch import Assignments, CancelNotice, Delivery, DrainNotice
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
    batch = pb.CoordinatorBatch()
    size = 0
    for delivery in deliveries:
        if isinstance(delivery, Assignments):
            for claimed in delivery.claimed:
                item = _assignment(claimed)
                item_size = len(item.payload) + sum(len(p.output) for p in item.parent_outputs)
                if size and size + item_size > MAX_BATCH_PAYLOAD_BYTES:
                    yield Message(batch=batch)
                    batch, size = pb.CoordinatorBatch(), 0
                batch.assignments.append(item)
                size += item_size
        elif isinstance(delivery, StartAnswer):
            batch.start_answers.append(_start_answer(delivery))
        elif isinstance(delivery, ResultAnswer):
            batch.result_acks.append(_result_ack(delivery))
        elif isinstance(delivery, CancelNotice):
            batch.cancels.add(attempt_id=delivery.attempt_id, reason=delivery.reason)
        else:
            if _has_items(batch):
                yield Message(batch=batch)
                batch, size = pb.CoordinatorBatch(), 0
            yield from frame(delivery)
    if _has_items(batch):
        yield Message(batch=batch)


def _has_items(batch: pb.CoordinatorBatch) -> bool:
    return bool(batch.assignments or batch.start_answers or batch.result_acks or batch.cancels)


def welcome(coordinator_id: str) -> Message:
    return Message(welcome=pb.Welcome(coordinator_id=coordinator_id, batches=True))


def start_answer(answer: StartAnswer) -> Message:
    return Message(start_answer=_start_answer(answer))


def _start_answer(answer: StartAnswer) -> pb.StartAnswer:
    return pb.StartAnswer(
        attempt_id=answer.attempt_id,
        granted=answer.granted,
        execution_number=answer.execution_number,
        reason=answer.reason,
    )


def heartbeat_answer(answer: HeartbeatAnswer) -> Message:
    return Message(
        heartbeat_answer=pb.HeartbeatAnswer(
            lost_attempt_ids=sorted(answer.lost), lease_expires_at=timestamp(answer.lease_expires_at_ms)
        )
    )


def result_ack(answer: ResultAnswer) -> Message:
    return Message(result_ack=_result_ack(answer))


def _result_ack(answer: ResultAnswer) -> pb.ResultAck:
    """ACCEPTED, STALE (R-11) or REJECTED with the error's reason and metadata (docs/limits.md)."""
    ack = pb.ResultAck(
        attempt_id=answer.attempt_id,
        status=pb.ResultAck.STATUS_ACCEPTED if answer.accepted else pb.ResultAck.STATUS_STALE,
    )
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
    return ack


def assignment(claimed: Claimed) -> Message:
    return Message(assignment=_assignment(claimed))


def _assignment(claimed: Claimed) -> pb.Assignment:
    job = claimed.job
    message = pb.Assignment(
        job_id=job.id,
        attempt_id=claimed.attempt_id,
        wire_name=job.wire_name,
        queue=job.queue,
        payload=job.payload,
        payload_version=job.payload_version,
        lease_expires_at=timestamp(claimed.lease_expires_at_ms),
        execution_number=job.executions + 1,
        max_executions=job.max_executions,
        generation=job.generation,
    )
    if job.execution_timeout_ms is not None:
        message.execution_timeout.CopyFrom(duration(job.execution_timeout_ms))
    for parent_id, output in sorted(claimed.parent_outputs.items()):
        message.parent_outputs.add(job_id=parent_id, output=output)
    return message


def cancel(attempt_id: str, reason: str) -> Message:
    """R-8: asks the worker to cancel the handler's run of ``attempt_id``."""
    return Message(cancel=pb.Cancel(attempt_id=attempt_id, reason=reason))


def drain(timeout_s: float) -> Message:
    return Message(drain=pb.Drain(deadline=duration(int(timeout_s * 1000))))

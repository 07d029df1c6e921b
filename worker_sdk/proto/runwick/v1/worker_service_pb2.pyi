import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from worker_sdk.proto.runwick.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConnectRequest(_message.Message):
    __slots__ = ("hello", "credit", "start", "heartbeat", "result", "release", "batch")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    credit: Credit
    start: StartRequest
    heartbeat: Heartbeat
    result: Result
    release: Release
    batch: WorkerBatch
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ..., start: _Optional[_Union[StartRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., batch: _Optional[_Union[WorkerBatch, _Mapping]] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("welcome", "assignment", "start_answer", "heartbeat_answer", "result_ack", "cancel", "drain", "batch")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    START_ANSWER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ANSWER_FIELD_NUMBER: _ClassVar[int]
    RESULT_ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assignment: Assignment
    start_answer: StartAnswer
    heartbeat_answer: HeartbeatAnswer
    result_ack: ResultAck
    cancel: Cancel
    drain: Drain
    batch: CoordinatorBatch
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assignment: _Optional[_Union[Assignment, _Mapping]] = ..., start_answer: _Optional[_Union[StartAnswer, _Mapping]] = ..., heartbeat_answer: _Optional[_Union[HeartbeatAnswer, _Mapping]] = ..., result_ack: _Optional[_Union[ResultAck, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., batch: _Optional[_Union[CoordinatorBatch, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("worker_id", "queues", "wire_names", "capacity", "lease", "batches", "host", "sdk")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    WIRE_NAMES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    wire_names: _containers.RepeatedScalarFieldContainer[str]
    capacity: int
    lease: _duration_pb2.Duration
    batches: bool
    host: str
    sdk: str
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., wire_names: _Optional[_Iterable[str]] = ..., capacity: _Optional[int] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., batches: _Optional[bool] = ..., host: _Optional[str] = ..., sdk: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("coordinator_id", "batches")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: str
    batches: bool
    def __init__(self, coordinator_id: _Optional[str] = ..., batches: _Optional[bool] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class ParentOutput(_message.Message):
    __slots__ = ("job_id", "output", "trace_context")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    output: bytes
    trace_context: _job_pb2.TraceContext
    def __init__(self, job_id: _Optional[str] = ..., output: _Optional[bytes] = ..., trace_context: _Optional[_Union[_job_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("job_id", "attempt_id", "wire_name", "queue", "payload", "payload_version", "lease_expires_at", "execution_timeout", "execution_number", "max_executions", "generation", "parent_outputs", "trace_context")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    WIRE_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_NUMBER_FIELD_NUMBER: _ClassVar[int]
    MAX_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARENT_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    wire_name: str
    queue: str
    payload: bytes
    payload_version: int
    lease_expires_at: _timestamp_pb2.Timestamp
    execution_timeout: _duration_pb2.Duration
    execution_number: int
    max_executions: int
    generation: int
    parent_outputs: _containers.RepeatedCompositeFieldContainer[ParentOutput]
    trace_context: _job_pb2.TraceContext
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., wire_name: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_version: _Optional[int] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., execution_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., execution_number: _Optional[int] = ..., max_executions: _Optional[int] = ..., generation: _Optional[int] = ..., parent_outputs: _Optional[_Iterable[_Union[ParentOutput, _Mapping]]] = ..., trace_context: _Optional[_Union[_job_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class StartRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class StartAnswer(_message.Message):
    __slots__ = ("attempt_id", "granted", "execution_number", "reason")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_NUMBER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    granted: bool
    execution_number: int
    reason: str
    def __init__(self, attempt_id: _Optional[str] = ..., granted: _Optional[bool] = ..., execution_number: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("attempt_ids", "lease", "progress")
    ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    lease: _duration_pb2.Duration
    progress: _containers.RepeatedCompositeFieldContainer[ProgressReport]
    def __init__(self, attempt_ids: _Optional[_Iterable[str]] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., progress: _Optional[_Iterable[_Union[ProgressReport, _Mapping]]] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("attempt_id", "progress")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    progress: _job_pb2.Progress
    def __init__(self, attempt_id: _Optional[str] = ..., progress: _Optional[_Union[_job_pb2.Progress, _Mapping]] = ...) -> None: ...

class HeartbeatAnswer(_message.Message):
    __slots__ = ("lost_attempt_ids", "lease_expires_at")
    LOST_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    lost_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    lease_expires_at: _timestamp_pb2.Timestamp
    def __init__(self, lost_attempt_ids: _Optional[_Iterable[str]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("attempt_id", "outcome", "error_code", "exception_type", "message", "detail", "output", "retry_delay")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    outcome: _job_pb2.Outcome
    error_code: str
    exception_type: str
    message: str
    detail: str
    output: bytes
    retry_delay: _duration_pb2.Duration
    def __init__(self, attempt_id: _Optional[str] = ..., outcome: _Optional[_Union[_job_pb2.Outcome, str]] = ..., error_code: _Optional[str] = ..., exception_type: _Optional[str] = ..., message: _Optional[str] = ..., detail: _Optional[str] = ..., output: _Optional[bytes] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("attempt_id", "status", "job_state", "retry_delay", "reason", "message", "metadata")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[ResultAck.Status]
        STATUS_ACCEPTED: _ClassVar[ResultAck.Status]
        STATUS_STALE: _ClassVar[ResultAck.Status]
        STATUS_REJECTED: _ClassVar[ResultAck.Status]
    STATUS_UNSPECIFIED: ResultAck.Status
    STATUS_ACCEPTED: ResultAck.Status
    STATUS_STALE: ResultAck.Status
    STATUS_REJECTED: ResultAck.Status
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    status: ResultAck.Status
    job_state: _job_pb2.JobState
    retry_delay: _duration_pb2.Duration
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, attempt_id: _Optional[str] = ..., status: _Optional[_Union[ResultAck.Status, str]] = ..., job_state: _Optional[_Union[_job_pb2.JobState, str]] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WorkerBatch(_message.Message):
    __slots__ = ("releases", "starts", "results", "credit")
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    releases: _containers.RepeatedCompositeFieldContainer[Release]
    starts: _containers.RepeatedCompositeFieldContainer[StartRequest]
    results: _containers.RepeatedCompositeFieldContainer[Result]
    credit: int
    def __init__(self, releases: _Optional[_Iterable[_Union[Release, _Mapping]]] = ..., starts: _Optional[_Iterable[_Union[StartRequest, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[Result, _Mapping]]] = ..., credit: _Optional[int] = ...) -> None: ...

class CoordinatorBatch(_message.Message):
    __slots__ = ("assignments", "start_answers", "result_acks", "cancels")
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    START_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    RESULT_ACKS_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    start_answers: _containers.RepeatedCompositeFieldContainer[StartAnswer]
    result_acks: _containers.RepeatedCompositeFieldContainer[ResultAck]
    cancels: _containers.RepeatedCompositeFieldContainer[Cancel]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., start_answers: _Optional[_Iterable[_Union[StartAnswer, _Mapping]]] = ..., result_acks: _Optional[_Iterable[_Union[ResultAck, _Mapping]]] = ..., cancels: _Optional[_Iterable[_Union[Cancel, _Mapping]]] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("attempt_id", "reason")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    reason: str
    def __init__(self, attempt_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("deadline",)
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    deadline: _duration_pb2.Duration
    def __init__(self, deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

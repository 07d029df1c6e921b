import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_SCHEDULED: _ClassVar[JobState]
    JOB_STATE_WAITING: _ClassVar[JobState]
    JOB_STATE_AVAILABLE: _ClassVar[JobState]
    JOB_STATE_RESERVED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_SUCCEEDED: _ClassVar[Outcome]
    OUTCOME_RETRYABLE_FAILURE: _ClassVar[Outcome]
    OUTCOME_PERMANENT_FAILURE: _ClassVar[Outcome]
    OUTCOME_TIMED_OUT: _ClassVar[Outcome]
    OUTCOME_CANCELLED: _ClassVar[Outcome]
    OUTCOME_INTERRUPTED: _ClassVar[Outcome]
    OUTCOME_ABANDONED: _ClassVar[Outcome]
    OUTCOME_UNSTARTED_ABANDONED: _ClassVar[Outcome]
    OUTCOME_RELEASED: _ClassVar[Outcome]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_SCHEDULED: JobState
JOB_STATE_WAITING: JobState
JOB_STATE_AVAILABLE: JobState
JOB_STATE_RESERVED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_SUCCEEDED: Outcome
OUTCOME_RETRYABLE_FAILURE: Outcome
OUTCOME_PERMANENT_FAILURE: Outcome
OUTCOME_TIMED_OUT: Outcome
OUTCOME_CANCELLED: Outcome
OUTCOME_INTERRUPTED: Outcome
OUTCOME_ABANDONED: Outcome
OUTCOME_UNSTARTED_ABANDONED: Outcome
OUTCOME_RELEASED: Outcome

class JobSettings(_message.Message):
    __slots__ = ("max_executions", "retry_initial_delay", "retry_max_delay", "execution_timeout", "no_execution_timeout", "max_unstarted_abandonments", "unstarted_initial_delay", "unstarted_max_delay")
    MAX_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_INITIAL_DELAY_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_DELAY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    NO_EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_UNSTARTED_ABANDONMENTS_FIELD_NUMBER: _ClassVar[int]
    UNSTARTED_INITIAL_DELAY_FIELD_NUMBER: _ClassVar[int]
    UNSTARTED_MAX_DELAY_FIELD_NUMBER: _ClassVar[int]
    max_executions: int
    retry_initial_delay: _duration_pb2.Duration
    retry_max_delay: _duration_pb2.Duration
    execution_timeout: _duration_pb2.Duration
    no_execution_timeout: bool
    max_unstarted_abandonments: int
    unstarted_initial_delay: _duration_pb2.Duration
    unstarted_max_delay: _duration_pb2.Duration
    def __init__(self, max_executions: _Optional[int] = ..., retry_initial_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_max_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., execution_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., no_execution_timeout: _Optional[bool] = ..., max_unstarted_abandonments: _Optional[int] = ..., unstarted_initial_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., unstarted_max_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "wire_name", "queue", "payload", "payload_version", "priority", "state", "run_at", "idempotency_key", "settings", "executions", "unstarted_abandonments", "generation", "current_attempt_id", "lease_expires_at", "created_at", "updated_at", "finished_at", "last_error_code", "output", "parent_ids", "cancel_requested", "child_ids", "progress", "waiting_reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    WIRE_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    UNSTARTED_ABANDONMENTS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PARENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CHILD_IDS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    wire_name: str
    queue: str
    payload: bytes
    payload_version: int
    priority: int
    state: JobState
    run_at: _timestamp_pb2.Timestamp
    idempotency_key: str
    settings: JobSettings
    executions: int
    unstarted_abandonments: int
    generation: int
    current_attempt_id: str
    lease_expires_at: _timestamp_pb2.Timestamp
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    last_error_code: str
    output: bytes
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    cancel_requested: bool
    child_ids: _containers.RepeatedScalarFieldContainer[str]
    progress: Progress
    waiting_reason: str
    def __init__(self, id: _Optional[str] = ..., wire_name: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_version: _Optional[int] = ..., priority: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., settings: _Optional[_Union[JobSettings, _Mapping]] = ..., executions: _Optional[int] = ..., unstarted_abandonments: _Optional[int] = ..., generation: _Optional[int] = ..., current_attempt_id: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error_code: _Optional[str] = ..., output: _Optional[bytes] = ..., parent_ids: _Optional[_Iterable[str]] = ..., cancel_requested: _Optional[bool] = ..., child_ids: _Optional[_Iterable[str]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., waiting_reason: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("done", "total", "message")
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    done: float
    total: float
    message: str
    def __init__(self, done: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("id", "job_id", "generation", "worker_id", "execution_number", "claimed_at", "started_at", "finished_at", "outcome", "error_code", "exception_type", "retry_delay")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    generation: int
    worker_id: str
    execution_number: int
    claimed_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    outcome: Outcome
    error_code: str
    exception_type: str
    retry_delay: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., generation: _Optional[int] = ..., worker_id: _Optional[str] = ..., execution_number: _Optional[int] = ..., claimed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., error_code: _Optional[str] = ..., exception_type: _Optional[str] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from worker_sdk.proto.runwick.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NewJob(_message.Message):
    __slots__ = ("wire_name", "queue", "payload", "payload_version", "priority", "run_at", "idempotency_key", "settings", "parent_ids", "id", "unique_key", "trace_context", "concurrency_key")
    WIRE_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PARENT_IDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    wire_name: str
    queue: str
    payload: bytes
    payload_version: int
    priority: int
    run_at: _timestamp_pb2.Timestamp
    idempotency_key: str
    settings: _job_pb2.JobSettings
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    id: str
    unique_key: str
    trace_context: _job_pb2.TraceContext
    concurrency_key: str
    def __init__(self, wire_name: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_version: _Optional[int] = ..., priority: _Optional[int] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., settings: _Optional[_Union[_job_pb2.JobSettings, _Mapping]] = ..., parent_ids: _Optional[_Iterable[str]] = ..., id: _Optional[str] = ..., unique_key: _Optional[str] = ..., trace_context: _Optional[_Union[_job_pb2.TraceContext, _Mapping]] = ..., concurrency_key: _Optional[str] = ...) -> None: ...

class EnqueueRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[NewJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[NewJob, _Mapping]]] = ...) -> None: ...

class EnqueuedJob(_message.Message):
    __slots__ = ("id", "existing", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    existing: bool
    state: _job_pb2.JobState
    def __init__(self, id: _Optional[str] = ..., existing: _Optional[bool] = ..., state: _Optional[_Union[_job_pb2.JobState, str]] = ...) -> None: ...

class EnqueueResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[EnqueuedJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[EnqueuedJob, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("queue", "state", "wire_name", "page_size", "page_token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WIRE_NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    state: _job_pb2.JobState
    wire_name: str
    page_size: int
    page_token: str
    def __init__(self, queue: _Optional[str] = ..., state: _Optional[_Union[_job_pb2.JobState, str]] = ..., wire_name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListAttemptsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListAttemptsResponse(_message.Message):
    __slots__ = ("attempts",)
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[_job_pb2.Attempt]
    def __init__(self, attempts: _Optional[_Iterable[_Union[_job_pb2.Attempt, _Mapping]]] = ...) -> None: ...

class WaitJobRequest(_message.Message):
    __slots__ = ("id", "timeout")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    timeout: _duration_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WaitJobResponse(_message.Message):
    __slots__ = ("job", "terminal")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    terminal: bool
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., terminal: _Optional[bool] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("id", "include_dependents")
    ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    include_dependents: bool
    def __init__(self, id: _Optional[str] = ..., include_dependents: _Optional[bool] = ...) -> None: ...

class RetryJobResponse(_message.Message):
    __slots__ = ("job", "reopened_ids")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REOPENED_IDS_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    reopened_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., reopened_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RevealErrorRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class RevealErrorResponse(_message.Message):
    __slots__ = ("attempt_id", "job_id", "generation", "error_code", "exception_type", "message", "detail")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    job_id: str
    generation: int
    error_code: str
    exception_type: str
    message: str
    detail: str
    def __init__(self, attempt_id: _Optional[str] = ..., job_id: _Optional[str] = ..., generation: _Optional[int] = ..., error_code: _Optional[str] = ..., exception_type: _Optional[str] = ..., message: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

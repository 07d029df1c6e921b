import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from worker_sdk.proto.runwick.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueueStateCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _job_pb2.JobState
    count: int
    def __init__(self, state: _Optional[_Union[_job_pb2.JobState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "paused", "concurrency_limit", "counts", "oldest_available_age", "key_limit", "active_keys", "keys_at_limit", "rate", "keys_at_rate", "first_keys_at_limit", "first_keys_at_rate", "held_back", "runnable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_AVAILABLE_AGE_FIELD_NUMBER: _ClassVar[int]
    KEY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    KEYS_AT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    KEYS_AT_RATE_FIELD_NUMBER: _ClassVar[int]
    FIRST_KEYS_AT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    FIRST_KEYS_AT_RATE_FIELD_NUMBER: _ClassVar[int]
    HELD_BACK_FIELD_NUMBER: _ClassVar[int]
    RUNNABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    paused: bool
    concurrency_limit: int
    counts: _containers.RepeatedCompositeFieldContainer[QueueStateCount]
    oldest_available_age: _duration_pb2.Duration
    key_limit: int
    active_keys: int
    keys_at_limit: int
    rate: QueueRate
    keys_at_rate: int
    first_keys_at_limit: _containers.RepeatedScalarFieldContainer[str]
    first_keys_at_rate: _containers.RepeatedScalarFieldContainer[str]
    held_back: _containers.RepeatedCompositeFieldContainer[QueueHeldBack]
    runnable: int
    def __init__(self, name: _Optional[str] = ..., paused: _Optional[bool] = ..., concurrency_limit: _Optional[int] = ..., counts: _Optional[_Iterable[_Union[QueueStateCount, _Mapping]]] = ..., oldest_available_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., key_limit: _Optional[int] = ..., active_keys: _Optional[int] = ..., keys_at_limit: _Optional[int] = ..., rate: _Optional[_Union[QueueRate, _Mapping]] = ..., keys_at_rate: _Optional[int] = ..., first_keys_at_limit: _Optional[_Iterable[str]] = ..., first_keys_at_rate: _Optional[_Iterable[str]] = ..., held_back: _Optional[_Iterable[_Union[QueueHeldBack, _Mapping]]] = ..., runnable: _Optional[int] = ...) -> None: ...

class QueueHeldBack(_message.Message):
    __slots__ = ("kind", "count")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    count: int
    def __init__(self, kind: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class QueueRate(_message.Message):
    __slots__ = ("count", "period", "per_key")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    PER_KEY_FIELD_NUMBER: _ClassVar[int]
    count: int
    period: _duration_pb2.Duration
    per_key: bool
    def __init__(self, count: _Optional[int] = ..., period: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., per_key: _Optional[bool] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "next_page_token")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    next_page_token: str
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class PauseQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class ResumeQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class SetQueueLimitRequest(_message.Message):
    __slots__ = ("name", "limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    limit: int
    def __init__(self, name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class SetQueueLimitResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class SetQueueKeyLimitRequest(_message.Message):
    __slots__ = ("name", "limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    limit: int
    def __init__(self, name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class SetQueueKeyLimitResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class SetQueueRateRequest(_message.Message):
    __slots__ = ("name", "rate")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    rate: QueueRate
    def __init__(self, name: _Optional[str] = ..., rate: _Optional[_Union[QueueRate, _Mapping]] = ...) -> None: ...

class SetQueueRateResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

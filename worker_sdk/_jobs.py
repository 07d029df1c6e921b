"""Job types: the ``@job`` declaration, payload encoding, and the upgrade chain.

A job type is a dataclass declared with ``@job``. Its payload travels as compact UTF-8
JSON of the dataclass fields together with the type's version; a worker with a newer
version upgrades old payloads one version at a time with the declared upgraders.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from worker_sdk._errors import ArgumentError, PayloadUndecodable
from worker_sdk._settings import SettingsLayer
from worker_sdk._text import key_problem, name_problem

T = TypeVar("T")
Upgrader = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the JSON object of version ``v`` into the JSON object of version ``v + 1``."""

_SPEC_ATTRIBUTE = "__runwick_job__"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What ``@job`` declared about a payload type."""

    payload_type: type[Any]
    wire_name: str
    version: int
    queue: str
    priority: int
    settings: SettingsLayer
    upgraders: Mapping[int, Upgrader]
    concurrency_key: str | Callable[[Any], str] | None = None
    """The jobs' concurrency key, or how to derive it from a payload (docs/flow-control.md)."""

    def key_for(self, payload: object) -> str | None:
        """The concurrency key ``payload`` is enqueued with when the enqueue names none.

        Raises:
            ArgumentError: The derived key is not a str or breaks the key grammar.
        """
        if self.concurrency_key is None or isinstance(self.concurrency_key, str):
            return self.concurrency_key
        return check_concurrency_key(
            self.concurrency_key(payload), f"{self.wire_name}: derived concurrency_key"
        )


def job(
    wire_name: str,
    *,
    version: int = 1,
    queue: str = "default",
    priority: int = 0,
    max_executions: int | None = None,
    max_unstarted_abandonments: int | None = None,
    execution_timeout: timedelta | None = None,
    upgraders: Mapping[int, Upgrader] | None = None,
    concurrency_key: str | Callable[[Any], str] | None = None,
) -> Callable[[type[T]], type[T]]:
    """Declares a dataclass as a job type (the "attribute" level of R-3).

    Place it above ``@dataclass``::

        @job("payments.capture", max_executions=5)
        @dataclass
        class CapturePayment:
            order_id: str

    Args:
        wire_name: The job type's name on the wire: letters and digits of any script,
            ``.``, ``_`` and ``-``, at most 128 UTF-16 code units.
        version: The payload version this code writes and reads (>= 1).
        queue: The queue jobs of this type go to unless the client says otherwise.
        priority: Higher runs first within a queue.
        max_executions: Started runs allowed, 1-100 (R-1); None leaves it to lower levels.
        max_unstarted_abandonments: Consecutive unstarted claims allowed, 1-100 (R-4).
        execution_timeout: Run timeout, whole milliseconds up to 30 days (R-7).
        upgraders: Maps an old version ``v`` to a function that turns a version ``v``
            JSON object (a dict) into a version ``v + 1`` one.
        concurrency_key: The jobs' concurrency key (docs/flow-control.md): a str, or a
            function of the payload that returns one (``lambda p: p.tenant_id``). A key
            given at enqueue wins (R-3's order). Letters and digits of any script,
            ``.``, ``_``, ``-`` and ``:``, at most 128 UTF-16 code units.

    Returns:
        A class decorator that returns the class unchanged apart from the declaration.

    Raises:
        ValueError: A name, version or setting is invalid (``ArgumentError`` for settings).
        TypeError: The decorated class is not a dataclass.
    """
    problem = name_problem(wire_name)
    if problem is not None:
        raise ValueError(f"wire name {wire_name!r} {problem}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be an int >= 1, got {version!r}")
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"queue must be a non-empty str, got {queue!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an int, got {priority!r}")
    chain = dict(upgraders or {})
    for old, upgrade in chain.items():
        if isinstance(old, bool) or not isinstance(old, int) or not 1 <= old < version:
            raise ValueError(f"upgrader key {old!r} must be a version from 1 to {version - 1}")
        if not callable(upgrade):
            raise ValueError(f"upgrader for version {old} is not callable")
    settings = SettingsLayer(
        max_executions=max_executions,
        max_unstarted_abandonments=max_unstarted_abandonments,
        execution_timeout=execution_timeout,
    ).checked()
    if isinstance(concurrency_key, str):
        check_concurrency_key(concurrency_key, "concurrency_key")
    elif concurrency_key is not None and not callable(concurrency_key):
        raise ValueError(
            f"concurrency_key must be a str, a function of the payload or None, got {concurrency_key!r}"
        )

    def declare(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"@job({wire_name!r}) must decorate a dataclass; put it above @dataclass")
        spec = JobSpec(cls, wire_name, version, queue, priority, settings, chain, concurrency_key)
        setattr(cls, _SPEC_ATTRIBUTE, spec)
        return cls

    return declare


def find_spec(payload_type: object) -> JobSpec | None:
    """The declaration of a ``@job`` class (not inherited), or None."""
    if not isinstance(payload_type, type):
        return None
    spec = payload_type.__dict__.get(_SPEC_ATTRIBUTE)
    return spec if isinstance(spec, JobSpec) else None


def spec_of(payload_type: type[Any]) -> JobSpec:
    """The declaration of a ``@job`` class; raises ArgumentError for any other type."""
    spec = find_spec(payload_type)
    if spec is None:
        name = getattr(payload_type, "__qualname__", repr(payload_type))
        raise ArgumentError(f"{name} is not a job type; declare it with @job(...) above @dataclass")
    return spec


def encode_payload(payload: object) -> tuple[JobSpec, bytes]:
    """Encodes a ``@job`` dataclass instance as compact UTF-8 JSON of its fields.

    Raises:
        ArgumentError: ``payload`` is not a job instance or holds a value JSON cannot hold.
    """
    spec = spec_of(type(payload))
    try:
        data = _encode_json(payload)
    except (TypeError, ValueError) as error:
        raise ArgumentError(
            f"payload of {spec.wire_name!r} cannot be encoded as JSON ({type(error).__name__}); "
            "use str, int, float, bool, None, lists, dicts and nested dataclasses"
        ) from error
    return spec, data.encode("utf-8")


def _dataclass_fields(value: object) -> dict[str, Any]:
    """A dataclass instance's fields by name, for ``json.dumps`` to encode (at any depth):
    what ``dataclasses.asdict`` gives, without the deep copy of every value it makes
    first, which cost more than the encoding itself."""
    if isinstance(value, type) or not dataclasses.is_dataclass(value):
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    cls: type[Any] = type(value)
    return {name: getattr(value, name) for name in _field_names(cls)}


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(field.name for field in dataclasses.fields(cls))
    return names


_encode_json = json.JSONEncoder(
    default=_dataclass_fields, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
"""Compact JSON, dataclasses at any depth. One encoder for every payload: ``json.dumps``
with options builds a new one a call, a quarter of a small payload's encoding."""


def decode_payload(spec: JobSpec, payload: bytes, version: int) -> Any:
    """Decodes a payload of ``version`` into an instance of the job type.

    Version 0 (unset on the wire) is read as version 1. Older versions go through the
    upgrader chain.

    Raises:
        PayloadUndecodable: The bytes are not a JSON object, the version is newer than
            this code or has no upgrade path, an upgrader failed, or the fields do not
            fit the dataclass.
    """
    version = version or 1
    where = f"{spec.wire_name!r} payload version {version}"
    if version > spec.version:
        raise PayloadUndecodable(f"{where} is newer than this worker's version {spec.version}")
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise PayloadUndecodable(f"{where} is not UTF-8 JSON") from error
    for step in range(version, spec.version):
        if not isinstance(data, dict):
            raise PayloadUndecodable(f"{where} is not a JSON object at version {step}")
        upgrade = spec.upgraders.get(step)
        if upgrade is None:
            raise PayloadUndecodable(f"{where}: no upgrader from version {step} to {step + 1}")
        try:
            data = upgrade(data)
        except Exception as error:
            raise PayloadUndecodable(f"{where}: upgrader from version {step} raised") from error
    try:
        return _construct(spec.payload_type, data)
    except Exception as error:
        raise PayloadUndecodable(f"{where} does not fit {spec.payload_type.__qualname__}") from error


def _construct(cls: type[Any], data: object) -> Any:
    """Builds a dataclass from a JSON object, recursing into nested dataclass fields."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object for {cls.__qualname__}, got {type(data).__name__}")
    values = dict(data)
    for name, nested in _dataclass_typed_fields(cls):
        value = values.get(name)
        if isinstance(value, dict):
            values[name] = _construct(nested, value)
    return cls(**values)


_DATACLASS_TYPED_FIELDS: dict[type[Any], tuple[tuple[str, type[Any]], ...]] = {}


def _dataclass_typed_fields(cls: type[Any]) -> tuple[tuple[str, type[Any]], ...]:
    """The fields of ``cls`` annotated with a dataclass, and that class; found once a
    class. Resolving the annotations (strings, under ``from __future__ import
    annotations``) was a fifth of a worker's CPU for a no-op job when done per payload.
    Annotations that do not resolve raise each time and are not remembered."""
    found = _DATACLASS_TYPED_FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _DATACLASS_TYPED_FIELDS[cls] = tuple(
            (field.name, hint)
            for field in dataclasses.fields(cls)
            if isinstance(hint := hints.get(field.name), type) and dataclasses.is_dataclass(hint)
        )
    return found


def check_concurrency_key(key: object, what: str = "concurrency_key") -> str:
    """``key`` if it is a valid concurrency key (``grammar.concurrency_key_problem``);
    raises ArgumentError (a ValueError) naming ``what`` otherwise."""
    if not isinstance(key, str):
        raise ArgumentError(f"{what} must be a str, got {type(key).__name__}")
    problem = key_problem(key)
    if problem is not None:
        raise ArgumentError(f"{what} {key[:64]!r} {problem}")
    return key

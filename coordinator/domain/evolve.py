"""Copies of frozen records with some fields changed, fast enough for the hot path.

``dataclasses.replace`` looks up the fields and calls the generated ``__init__`` with
keywords, which on a frozen class sets every field through ``object.__setattr__`` again:
on a 30-field job record, several copies a job, that was a fifth of the writer's time.
The copier made here for each record class takes every value with one C-level
``attrgetter`` call and sets the fields through the slots' own descriptors. No record
of ours has a ``__post_init__`` or a field outside ``__init__``: the copier refuses such
classes rather than skip what they do.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

_copiers: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def evolve(record: R, **changes: Any) -> R:
    """``record`` with ``changes`` applied, like ``dataclasses.replace``: raises
    TypeError for a name that is not one of the record's fields."""
    cls = type(record)
    copier = _copiers.get(cls)
    if copier is None:
        copier = _copiers[cls] = _copier(cls)
    result: R = copier(record, changes)
    return result


def slot_setters(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    """What sets each field of a new ``cls`` without its ``__init__``: the slots' own
    descriptors, by field name in field order. For records built field by field on the
    hot path (``evolve``, the store's row loaders); refuses a class whose ``__init__``
    does more than set fields."""
    if not dataclasses.is_dataclass(cls) or not hasattr(cls, "__slots__"):
        raise TypeError(f"evolve works on slotted dataclasses, not {cls.__name__}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__; use dataclasses.replace")
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__} has fields outside __init__; use dataclasses.replace")
    return {f.name: getattr(cls, f.name).__set__ for f in fields}


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    setters = slot_setters(cls)
    names = tuple(setters)
    # Straight-line code, one line per field (as dataclasses itself generates __init__):
    # every value is copied by position, then the few changed fields are set again. A
    # loop over the fields, or a lookup of each in ``changes``, would cost as much as
    # the copy.
    lines = [
        "def copy(record, changes):",
        "    values = (values_of(record),)" if len(names) == 1 else "    values = values_of(record)",
        "    copied = new(cls)",
    ]
    lines += [f"    set_{i}(copied, values[{i}])" for i in range(len(names))]
    lines += [
        "    for name, value in changes.items():",
        "        setter = setters.get(name)",
        "        if setter is None:",
        "            unknown(name)",
        "        setter(copied, value)",
        "    return copied",
    ]
    namespace: dict[str, Any] = {
        "values_of": operator.attrgetter(*names),
        "new": object.__new__,
        "cls": cls,
        "setters": setters,
        "unknown": lambda name: _unknown(cls, name),
    }
    for i, name in enumerate(names):
        namespace[f"set_{i}"] = setters[name]
    exec("\n".join(lines), namespace)  # generated from the field names alone
    copy: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copy


def _unknown(cls: type, name: str) -> None:
    raise TypeError(f"{cls.__name__} has no field {name!r}")

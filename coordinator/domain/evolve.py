"""Copies of frozen records with some fields changed, fast enough for the hot path.

``dataclasses.replace`` looks up the fields and calls the generated ``__init__`` with
keywords, and a frozen class's ``__init__`` sets every field through
``object.__setattr__``: on a 30-field job record, several copies and row loads a job,
that was a large share of the writer's time. Setting the slots through their own
descriptors (``member.__set__``) halved it, but each is still a call through a method
wrapper.

So each record class gets a *draft*: a plain class with exactly the record's slots. A
new record is filled in as a draft, with ordinary attribute stores (which the
interpreter specializes), and then becomes the record class by ``__class__``
assignment, which Python allows between classes of the same layout. From then on it is
an ordinary frozen record: equal to, and hashing as, one built by its ``__init__``. No
record of ours has a ``__post_init__`` or a field outside ``__init__``; the drafts
refuse such classes rather than skip what they do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

_copiers: dict[tuple[type, tuple[str, ...]], Callable[[Any, dict[str, Any]], Any]] = {}
_MAX_COPIERS = 512
"""One copier per record class and set of changed names (a few per call site)."""
_drafts: dict[type, type] = {}


def evolve(record: R, **changes: Any) -> R:
    """``record`` with ``changes`` applied, like ``dataclasses.replace``: raises
    TypeError for a name that is not one of the record's fields."""
    key = (type(record), tuple(changes))
    copier = _copiers.get(key)
    if copier is None:
        if len(_copiers) >= _MAX_COPIERS:
            _copiers.clear()
        copier = _copiers[key] = _copier(*key)
    result: R = copier(record, changes)
    return result


def draft_class(cls: type) -> type:
    """The draft of the record class ``cls``: a plain class with the same slots, whose
    instances may be filled in and then given ``cls`` as their class (``new.__class__ =
    cls``). For records built field by field on the hot path (``evolve``, the store's
    row loaders); refuses a class whose ``__init__`` does more than set fields."""
    draft = _drafts.get(cls)
    if draft is None:
        draft = _drafts[cls] = _make_draft(cls)
    return draft


def _make_draft(cls: type) -> type:
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"evolve works on slotted dataclasses, not {cls.__name__}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__; use dataclasses.replace")
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__} has fields outside __init__; use dataclasses.replace")
    names = tuple(f.name for f in fields)
    if cls.__bases__ != (object,) or tuple(cls.__dict__["__slots__"]) != names:
        raise TypeError(f"{cls.__name__} must have its fields as its only slots, on object alone")
    draft = type(f"{cls.__name__}Draft", (), {"__slots__": names, "__module__": cls.__module__})
    try:
        probe: Any = object.__new__(draft)
        probe.__class__ = cls  # the layouts must match, checked once here
    except TypeError as exc:
        raise TypeError(f"{cls.__name__} cannot be drafted: {exc}") from exc
    return draft


def _copier(cls: type, changed: tuple[str, ...]) -> Callable[[Any, dict[str, Any]], Any]:
    draft = draft_class(cls)
    names: tuple[str, ...] = draft.__dict__["__slots__"]
    for name in changed:
        if name not in names:
            _unknown(cls, name)
    # Straight-line code, one line per field (as dataclasses itself generates __init__):
    # the changed fields from ``changes``, every other one from the record. A loop over
    # the fields, or a lookup of each in ``changes``, would cost as much as the copy.
    lines = ["def copy(record, changes):", "    copied = new(Draft)"]
    lines += [
        f"    copied.{name} = changes[{name!r}]" if name in changed else f"    copied.{name} = record.{name}"
        for name in names
    ]
    lines += ["    copied.__class__ = cls", "    return copied"]
    namespace: dict[str, Any] = {"new": object.__new__, "Draft": draft, "cls": cls}
    exec("\n".join(lines), namespace)  # generated from the field names alone
    copy: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copy


def _unknown(cls: type, name: str) -> None:
    raise TypeError(f"{cls.__name__} has no field {name!r}")

"""PostgreSQL: a column's values sent as one array in the binary format, encoded by type.

psycopg dumps a list in Python, element by element: it walks the list for an element to
pick the element's dumper by (``_find_list_element``), then calls that dumper, packs the
length and appends both for each element (``ListBinaryDumper._dump_list``, about 0.8 us
an element here). A 500-job enqueue sends about 13,000 elements, and a worker batch's
writes pay the same per row. The batched writes know each column's type from the schema
(``store.pg_arrays``), so they wrap a column's values in the array type of that column
(``typed``), and its dumper encodes the whole array with a few calls that loop in C:
one ``struct.pack`` of every length and value for numbers, one ``bytes.join`` of
lengths and encoded values for text and bytes. Arrays holding a NULL take an
element-by-element path, still without a dumper call per element. The coordinator runs
15% fewer instructions per enqueued job so, and 12% fewer per job of a worker batch
(callgrind, benchmarks/README.md).

The format (PostgreSQL's ``array_recv``): dimensions (1), a has-NULL flag, the element
type's OID, then the length and lower bound (1) of the dimension; each element is its
byte length (-1 for NULL) and its binary value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.abc import AdaptContext
from psycopg.adapt import Buffer, Dumper
from sqlalchemy import BigInteger, Boolean, Integer, LargeBinary, String
from sqlalchemy.types import TypeEngine

_HEAD = struct.Struct("!iiiii")
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)


class _Array:
    """The values of one column, to be sent as an array of its type."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = values


def _fixed_width(element_oid: int, code: str) -> Callable[[Sequence[Any], str], bytes]:
    """Numbers and booleans: every element ``size`` bytes in ``struct`` code ``code``."""
    size = struct.calcsize("!" + code)
    element = struct.Struct("!i" + code)

    def encode(values: Sequence[Any], encoding: str) -> bytes:
        count = len(values)
        if None not in values:
            pairs: list[Any] = [size] * (2 * count)
            pairs[1::2] = values
            return _HEAD.pack(1, 0, element_oid, count, 1) + struct.pack("!" + ("i" + code) * count, *pairs)
        body = b"".join(_NULL if value is None else element.pack(size, value) for value in values)
        return _HEAD.pack(1, 1, element_oid, count, 1) + body

    return encode


def _variable_width(element_oid: int, text: bool) -> Callable[[Sequence[Any], str], bytes]:
    """Text (encoded in the connection's encoding) and bytes: a length before each value."""

    def encode(values: Sequence[Any], encoding: str) -> bytes:
        count = len(values)
        if None not in values:
            data = [value.encode(encoding) for value in values] if text else list(values)
            parts: list[bytes] = [b""] * (2 * count)
            parts[0::2] = map(_LENGTH.pack, map(len, data))
            parts[1::2] = data
            return _HEAD.pack(1, 0, element_oid, count, 1) + b"".join(parts)
        pieces = []
        for value in values:
            if value is None:
                pieces.append(_NULL)
                continue
            data = value.encode(encoding) if text else value
            pieces += (_LENGTH.pack(len(data)), data)
        return _HEAD.pack(1, 1, element_oid, count, 1) + b"".join(pieces)

    return encode


def _array_type(
    name: str, array_oid: int, encode: Callable[[Sequence[Any], str], bytes]
) -> tuple[type[_Array], type[Dumper]]:
    """A wrapper class for one element type, and the dumper psycopg finds for it."""
    wrapper = type(name, (_Array,), {"__slots__": ()})

    class _Dumper(Dumper):
        format = pq.Format.BINARY
        oid = array_oid

        def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
            super().__init__(cls, context)
            self._encoding = self.connection.info.encoding if self.connection is not None else "utf-8"

        def dump(self, obj: Any) -> Buffer | None:
            try:
                return encode(obj.values, self._encoding)
            except (struct.error, AttributeError, TypeError, UnicodeError) as error:
                # As psycopg's own dumpers fail: a driver error, which the store reports.
                raise psycopg.DataError(f"cannot send a value as {name[:-5].lower()}: {error}") from error

    _Dumper.__name__ = _Dumper.__qualname__ = name + "Dumper"
    return wrapper, _Dumper


# OIDs of the element types and their array types (pg_type, fixed since PostgreSQL 8).
_BIGINTS = _array_type("BigIntArray", 1016, _fixed_width(20, "q"))
_INTEGERS = _array_type("IntegerArray", 1007, _fixed_width(23, "i"))
_BOOLEANS = _array_type("BooleanArray", 1000, _fixed_width(16, "?"))
_TEXTS = _array_type("TextArray", 1009, _variable_width(25, text=True))
_BYTES = _array_type("BytesArray", 1001, _variable_width(17, text=False))


def register(connection: psycopg.Connection[Any]) -> None:
    """Makes ``connection`` send the arrays ``typed`` makes (the store's PostgreSQL
    engines call it for every connection they open)."""
    for wrapper, dumper in (_BIGINTS, _INTEGERS, _BOOLEANS, _TEXTS, _BYTES):
        connection.adapters.register_dumper(wrapper, dumper)


def typed(column_type: TypeEngine[Any], values: Sequence[Any]) -> Any:
    """``values`` as the array of ``column_type`` (the PostgreSQL implementation of a
    column's type), to be sent in the binary format (a ``%b`` placeholder); a type this
    module does not encode gets the plain list, which psycopg dumps itself."""
    # Most specific first: BigInteger is an Integer.
    if isinstance(column_type, BigInteger):
        return _BIGINTS[0](values)
    if isinstance(column_type, Integer):
        return _INTEGERS[0](values)
    if isinstance(column_type, Boolean):
        return _BOOLEANS[0](values)
    if isinstance(column_type, String):  # Text is a String
        return _TEXTS[0](values)
    if isinstance(column_type, LargeBinary):
        return _BYTES[0](values)
    return list(values)

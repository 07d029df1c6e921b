"""A cheap look at raw protobuf bytes before they are parsed: how often fields occur.

Parsing costs far more than the bytes it reads: an empty sub-message is 2 bytes on the
wire and a Python protobuf object of about 150 bytes, and converting it costs more. So
the coordinator counts a request's repeated fields in its raw bytes first and refuses
one over its bound before the parser builds anything (``coordinator.api.ingress``).

The scan reads one tag and one length per field and jumps over the field's value, at
one level of the message. It stops as soon as a count passes its limit, so it costs
O(min(count, limit)) fields, never O(message size).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

OTHER_FIELDS = 0
"""The key under which ``count_fields`` counts the fields it was not asked about
(field number 0 is not a valid protobuf field number, so no real field has it)."""

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """The bytes are not a protobuf message this scan can read (truncated, a group, or
    a wire type protobuf does not have)."""


def count_fields(data: bytes | memoryview, limits: Mapping[int, int]) -> dict[int, int]:
    """How often each field number of ``limits`` occurs at the top level of ``data``;
    every other field is counted under ``OTHER_FIELDS``, whose limit ``limits`` must hold.

    Stops at the first field whose count passes its limit: that count is then its
    limit + 1 and the counts of the fields after it are not complete.

    Raises WireError for bytes that are not a protobuf message.
    """
    counts = dict.fromkeys(limits, 0)
    for number, _, _ in _fields(memoryview(data)):
        key = number if number in counts else OTHER_FIELDS
        counts[key] += 1
        if counts[key] > limits[key]:
            break
    return counts


def field_values(data: bytes | memoryview, number: int, max_fields: int) -> Iterator[memoryview]:
    """The values of the length-delimited field ``number`` at the top level of ``data``
    (sub-messages, strings, bytes), without copying; reads at most ``max_fields`` fields
    of any number before raising WireError, so a message of many tiny fields costs
    nothing more than that.

    Raises WireError for bytes that are not a protobuf message.
    """
    for seen, (field, wire_type, value) in enumerate(_fields(memoryview(data)), start=1):
        if seen > max_fields:
            raise WireError(f"more than {max_fields} fields")
        if field == number:
            if wire_type != _LENGTH_DELIMITED:
                raise WireError(f"field {number} is not length-delimited")
            yield value


def sole_field(data: bytes | memoryview) -> int | None:
    """The field number when ``data`` is exactly one length-delimited field (a message
    whose one field is a oneof's sub-message, the common case), else None; costs a few
    byte reads, for a fast path before ``count_fields`` or ``field_values``."""
    try:
        tag, position = _varint(data, 0)
        length, position = _varint(data, position)
    except WireError:
        return None
    if tag & 7 != _LENGTH_DELIMITED or tag >> 3 == 0 or position + length != len(data):
        return None
    return tag >> 3


def _fields(data: memoryview) -> Iterator[tuple[int, int, memoryview]]:
    """(field number, wire type, value bytes) of each field of ``data``, in order."""
    position, end = 0, len(data)
    while position < end:
        tag, position = _varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        start = position
        if wire_type == _VARINT:
            _, position = _varint(data, position)
        elif wire_type == _FIXED64:
            position += 8
        elif wire_type == _FIXED32:
            position += 4
        elif wire_type == _LENGTH_DELIMITED:
            length, start = _varint(data, position)
            position = start + length
        else:  # groups (3, 4) are not in proto3 messages; 6 and 7 do not exist
            raise WireError(f"wire type {wire_type}")
        if position > end:
            raise WireError("truncated field")
        yield number, wire_type, data[start:position]


def _varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it."""
    if position < len(data) and data[position] < 0x80:  # one byte: most tags and lengths
        return data[position], position + 1
    value = shift = 0
    for index in range(position, min(position + _MAX_VARINT_BYTES, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise WireError("truncated or overlong varint")

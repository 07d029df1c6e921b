"""``@job`` declarations, payload encoding and the upgrade chain (docs/protocol.md#payloads, R-5)."""

from __future__ import annotations

import json
import typing
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from worker_sdk import ArgumentError, job
from worker_sdk._errors import PayloadUndecodable
from worker_sdk._jobs import decode_payload, encode_payload, find_spec, spec_of


@job("payments.capture", max_executions=5, queue="payments", priority=3)
@dataclass
class CapturePayment:
    order_id: str
    amount_cents: int = 0


@dataclass
class Address:
    city: str
    lines: list[str] = field(default_factory=list)


@job("mail.send")
@dataclass
class SendMail:
    to: str
    address: Address


def _rename_to_email(data: dict[str, Any]) -> dict[str, Any]:
    return {"email": data.pop("address"), **data}


def _add_locale(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "locale": "en"}


@job("users.welcome", version=3, upgraders={1: _rename_to_email, 2: _add_locale})
@dataclass
class WelcomeUser:
    email: str
    locale: str


def test_declaration_is_kept_on_the_class() -> None:
    spec = spec_of(CapturePayment)
    assert (spec.wire_name, spec.version, spec.queue, spec.priority) == ("payments.capture", 1, "payments", 3)
    assert spec.settings.max_executions == 5
    assert find_spec(object) is None


def test_subclasses_do_not_inherit_the_declaration() -> None:
    @dataclass
    class Child(CapturePayment):
        pass

    assert find_spec(Child) is None
    with pytest.raises(ArgumentError, match="not a job type"):
        encode_payload(Child("o-1"))


def test_payload_is_compact_utf8_json_of_the_fields() -> None:
    spec, data = encode_payload(CapturePayment("ü-1", 250))
    assert spec.wire_name == "payments.capture"
    assert data == '{"order_id":"ü-1","amount_cents":250}'.encode()


def test_nested_dataclasses_round_trip() -> None:
    mail = SendMail("a@example.com", Address("Zürich", ["Bahnhofstrasse 1"]))
    spec, data = encode_payload(mail)
    assert decode_payload(spec, data, spec.version) == mail


def test_a_payload_type_is_resolved_once_for_all_its_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    @job("tests.resolved_once")
    @dataclass
    class Ship:
        to: Address

    resolved: list[type] = []
    get_type_hints = typing.get_type_hints

    def counting(cls: type, *args: Any, **kwargs: Any) -> dict[str, Any]:
        resolved.append(cls)
        return get_type_hints(cls, *args, **kwargs)

    monkeypatch.setattr(typing, "get_type_hints", counting)
    payloads = [Ship(Address(f"city {n}", [f"line {n}"])) for n in range(3)]
    decoded = [decode_payload(*encode_payload(payload), 1) for payload in payloads]
    assert decoded == payloads  # the nested dataclass is still built at every decode
    assert resolved.count(Ship) == 1
    assert resolved.count(Address) <= 1  # another test may have decoded an Address first


def test_a_payload_type_whose_annotations_do_not_resolve_is_undecodable_every_time() -> None:
    @job("tests.unresolvable")
    @dataclass
    class Broken:
        part: NoSuchType  # type: ignore[name-defined]  # noqa: F821

    spec, data = spec_of(Broken), b'{"part": {}}'
    for _ in range(2):  # not remembered as having no nested dataclasses
        with pytest.raises(PayloadUndecodable, match="does not fit"):
            decode_payload(spec, data, 1)


def test_values_json_cannot_hold_are_rejected_at_encoding() -> None:
    with pytest.raises(ArgumentError, match=r"payments\.capture.*cannot be encoded"):
        encode_payload(CapturePayment("o-1", amount_cents=float("nan")))  # type: ignore[arg-type]


@dataclass
class Route:
    stops: list[Address]
    by_city: dict[str, Address]
    legs: tuple[int, ...] = ()


@job("routes.plan")
@dataclass
class PlanRoute:
    route: Route
    note: Any = None


def test_dataclasses_nested_in_lists_dicts_and_tuples_encode_as_asdict_does() -> None:
    route = Route([Address("Bern"), Address("Chur", ["Gleis 2"])], {"start": Address("Bern")}, (1, 2))
    payload = PlanRoute(route, note={"tags": ["a", 1.5, None, True]})
    spec, data = encode_payload(payload)
    assert data == json.dumps(asdict(payload), separators=(",", ":"), ensure_ascii=False).encode()
    assert spec.wire_name == "routes.plan"


@pytest.mark.parametrize(
    "note",
    [datetime(2026, 1, 1), Address, {1.5j: "x"}, {(1, 2): "x"}, object()],
    ids=["datetime", "a dataclass type", "complex key", "tuple key", "object"],
)
def test_values_that_are_not_json_are_an_argument_error(note: object) -> None:
    with pytest.raises(ArgumentError, match=r"routes\.plan.*cannot be encoded as JSON"):
        encode_payload(PlanRoute(Route([], {}), note=note))


def test_a_payload_that_contains_itself_is_an_argument_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ArgumentError, match="cannot be encoded as JSON"):
        encode_payload(PlanRoute(Route([], {}), note=loop))


def test_upgrade_chain_runs_one_version_at_a_time() -> None:
    spec = spec_of(WelcomeUser)
    v1 = json.dumps({"address": "a@example.com"}).encode()
    assert decode_payload(spec, v1, 1) == WelcomeUser("a@example.com", "en")
    v2 = json.dumps({"email": "b@example.com"}).encode()
    assert decode_payload(spec, v2, 2) == WelcomeUser("b@example.com", "en")
    v3 = json.dumps({"email": "c@example.com", "locale": "de"}).encode()
    assert decode_payload(spec, v3, 3) == WelcomeUser("c@example.com", "de")


def test_version_zero_on_the_wire_reads_as_version_one() -> None:
    spec, data = encode_payload(CapturePayment("o-1"))
    assert decode_payload(spec, data, 0) == CapturePayment("o-1")


def _failing_upgrader(data: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("missing")


@job("broken.chain", version=3, upgraders={2: _failing_upgrader})
@dataclass
class BrokenChain:
    value: int


@pytest.mark.parametrize(
    ("payload", "version", "reason"),
    [
        (b"\xff\xfe", 1, "not UTF-8 JSON"),
        (b"{not json", 1, "not UTF-8 JSON"),
        (b"[1, 2]", 3, "does not fit"),
        (b'{"value": 1, "extra": 2}', 3, "does not fit"),
        (b"{}", 3, "does not fit"),
        (b'{"value": 1}', 4, "newer than this worker"),
        (b'{"value": 1}', 1, "no upgrader from version 1"),
        (b'{"value": 1}', 2, "upgrader from version 2 raised"),
    ],
)
def test_undecodable_payloads_raise_payload_undecodable(payload: bytes, version: int, reason: str) -> None:
    with pytest.raises(PayloadUndecodable, match=reason):
        decode_payload(spec_of(BrokenChain), payload, version)


def test_upgrader_returning_a_non_object_is_undecodable() -> None:
    @job("bad.upgrader", version=3, upgraders={1: lambda d: [d], 2: lambda d: d})  # type: ignore[list-item, return-value]
    @dataclass
    class BadUpgrader:
        value: int

    with pytest.raises(PayloadUndecodable, match="not a JSON object at version 2"):
        decode_payload(spec_of(BadUpgrader), b'{"value": 1}', 1)


@pytest.mark.parametrize(
    "name", ["payments.capture", "émail_envoi-2", "支払い.確定", "a", "x" * 128, "𝔘" * 64]
)
def test_wire_names_of_any_script_are_accepted(name: str) -> None:
    @job(name)
    @dataclass
    class Payload:
        pass

    assert spec_of(Payload).wire_name == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "must not be empty"),
        ("has space", "outside letters"),
        ("slash/name", "outside letters"),
        ("x" * 129, "129 UTF-16 code units"),
        ("𝔘" * 65, "130 UTF-16 code units"),
        ("lone\ud800surrogate", "outside letters"),
        ("x" * 128 + "\udfff", "129 UTF-16 code units"),  # counted, not raised on
        ("a b" * 50, "150 UTF-16 code units"),  # too long before bad characters, as the coordinator
    ],
)
def test_bad_wire_names_are_rejected_at_decoration(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        job(name)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"version": 0}, "version must be"),
        ({"upgraders": {2: _add_locale}}, "upgrader key 2"),
        ({"version": 2, "upgraders": {1: "nope"}}, "not callable"),
        ({"max_executions": 0}, "max_executions must be 1 to 100"),
        ({"max_unstarted_abandonments": 101}, "max_unstarted_abandonments must be 1 to 100"),
        ({"execution_timeout": timedelta(microseconds=1500)}, "whole number of milliseconds"),
        ({"queue": ""}, "queue must be"),
    ],
)
def test_bad_declarations_raise_value_error(options: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        job("ok.name", **options)


def test_job_requires_a_dataclass() -> None:
    with pytest.raises(TypeError, match="must decorate a dataclass"):

        @job("not.a.dataclass")
        class Plain:
            pass

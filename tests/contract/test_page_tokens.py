"""Page tokens of every list (ListJobs, ListAuditEvents) are opaque, validated and
bounded: a token the coordinator did not issue for that list is INVALID_ARGUMENT on
``page_token`` (``PAGE_TOKEN_INVALID``) before anything is read, on both engines, and
the tokens it does issue page exactly as before."""

from __future__ import annotations

import base64
import uuid

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor, Principal, Scope
from coordinator.domain.records import NewJobSpec
from coordinator.errors import InvalidArgument
from coordinator.service.audit import AuditLog
from coordinator.service.paging import decode_audit_token, decode_job_token, encode_audit_token
from coordinator.service.tokens import TokenService

from .harness import WIRE, Harness

OPERATOR = Actor(Principal("00000000000000ff", "ops", frozenset({Scope.ADMIN})), "ipv4:127.0.0.1:1")
SOME_JOB = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


def _b64(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


BAD_TOKENS = [
    "³",  # a digit to str.isdigit, not to int
    "²³",
    "٣",  # an Arabic-Indic digit: int() takes it
    "9223372036854775808",  # 2**63: over SQLite's INTEGER
    "9223372036854775807",
    "99999999999999999999999",
    "1",
    "0",
    "-1",
    " 1",
    "1e3",
    "abc",
    "page-2",
    "zzz",
    SOME_JOB,  # a raw job ID (what ListJobs used to hand out)
    SOME_JOB.upper(),
    "\x00",
    "a\x00b",
    "😀",
    "x" * 10_000,
    "A" * 65,
    "====",
    _b64(b"\x01a" + (2**63).to_bytes(8, "big")),  # well-formed, out of range
    _b64(b"\x01a" + (2**64 - 1).to_bytes(8, "big")),
    _b64(b"\x01a" + (0).to_bytes(8, "big")),
    _b64(b"\x02a" + (5).to_bytes(8, "big")),  # another version
    _b64(b"\x01a" + (5).to_bytes(7, "big")),  # wrong length
    _b64(b"\x01a" + (5).to_bytes(8, "big")) + "=",  # padded
    _b64(b"\x01j" + uuid.UUID(SOME_JOB).bytes) + "==",
    _b64(b"\x02j" + uuid.UUID(SOME_JOB).bytes),
    _b64(b"\x01j" + uuid.UUID(SOME_JOB).bytes[:15]),
]


def _list_jobs(harness: Harness, token: str, page_size: int = 2) -> tuple[list[str], str]:
    page, following = harness.jobs.list_jobs(
        queue=None, state=None, wire_name=None, page_size=page_size, page_token=token
    )
    return [job.id for job in page], following


def _list_events(harness: Harness, token: str, page_size: int = 2) -> tuple[list[int | None], str]:
    page, following = AuditLog(harness.store, CoordinatorConfig()).list(
        action=None, target=None, page_size=page_size, page_token=token
    )
    return [event.id for event in page], following


def _with_history(harness: Harness) -> None:
    """Five jobs and five audit events, so every list has more than one page."""
    for _ in range(5):
        harness.enqueue_specs([NewJobSpec(WIRE, b"")])
        harness.clock.advance(1)
    tokens = TokenService(harness.store, harness.clock, cache_ttl_s=60)
    for n in range(5):
        tokens.create(f"t{n}", ["read"], [], OPERATOR)


@pytest.mark.parametrize("listing", [_list_jobs, _list_events], ids=["jobs", "audit"])
def test_a_token_not_issued_for_the_list_is_invalid_argument(harness: Harness, listing) -> None:
    _with_history(harness)
    answers = {}

    for token in BAD_TOKENS:
        try:
            answers[token] = listing(harness, token)
        except InvalidArgument as refused:
            answers[token] = (refused.field, refused.reason, len(str(refused)) < 400)
        except Exception as failed:  # what a client would get as INTERNAL
            answers[token] = failed

    # Each refused naming page_token, quoting at most a short prefix of what was sent.
    wrong = {
        token[:40]: answer
        for token, answer in answers.items()
        if answer != ("page_token", "PAGE_TOKEN_INVALID", True)
    }
    assert wrong == {}


def test_a_token_of_one_list_is_refused_by_the_other(harness: Harness) -> None:
    _with_history(harness)
    _, jobs_token = _list_jobs(harness, "")
    _, events_token = _list_events(harness, "")
    assert jobs_token and events_token

    for listing, token in ((_list_events, jobs_token), (_list_jobs, events_token)):
        with pytest.raises(InvalidArgument) as refused:
            listing(harness, token)
        assert refused.value.reason == "PAGE_TOKEN_INVALID"


@pytest.mark.parametrize("listing", [_list_jobs, _list_events], ids=["jobs", "audit"])
def test_issued_tokens_are_opaque_and_page_through_every_item_once(harness: Harness, listing) -> None:
    _with_history(harness)
    everything, end = listing(harness, "", 100)
    assert end == "" and len(everything) >= 5

    seen, tokens, token = [], [], ""
    while True:
        page, token = listing(harness, token)
        seen += page
        if not token:
            break
        tokens.append(token)

    assert seen == everything  # the same items, in the same order, each once
    for token in tokens:
        assert token.isascii() and token.replace("-", "").replace("_", "").isalnum()
        assert not token.isdigit() and token not in {str(item) for item in everything}


def test_token_positions_round_trip_at_their_bounds() -> None:
    for event_id in (1, 2**31, 2**63 - 1):
        assert decode_audit_token(encode_audit_token(event_id)) == event_id
    for bad in (0, -1, 2**63):
        with pytest.raises(ValueError):
            encode_audit_token(bad)
    with pytest.raises(InvalidArgument):
        decode_job_token(encode_audit_token(7))

"""What a heartbeat's IDs cost (``dispatch.heartbeats``): the attempts its stream holds
go to the store, others only while the stream's allowance for them lasts (a reconnecting
worker's attempts from its earlier stream); the rest are answered lost unread."""

from __future__ import annotations

from coordinator.dispatch import heartbeats
from coordinator.dispatch.sessions import WorkerSession
from coordinator.domain.records import WorkerIdentity
from coordinator.service.work import HeartbeatAnswer, HeartbeatRequest


def _session(held: set[str], checks_left: int) -> WorkerSession:
    session = WorkerSession(None, "w", ("default",), ("a.b",), 1, 60_000)  # type: ignore[arg-type]
    session.held = held
    session.unheld_checks_left = checks_left
    return session


def _request(*attempt_ids: str) -> HeartbeatRequest:
    return HeartbeatRequest(list(attempt_ids), 60_000, WorkerIdentity("w", None, None))


def test_a_heartbeat_of_held_attempts_goes_to_the_store_whole_and_in_order() -> None:
    session = _session({"a", "b"}, 0)
    requests = [_request("b", "a")]
    assert heartbeats.screen([session], requests) == [set()]
    assert requests[0].attempt_ids == ["b", "a"]


def test_unheld_ids_are_looked_up_while_the_allowance_lasts_then_answered_lost_unread() -> None:
    session = _session({"held"}, 2)
    requests = [_request("held", "x", "y", "z")]
    (unread,) = heartbeats.screen([session], requests)
    looked_up = set(requests[0].attempt_ids)
    assert "held" in looked_up
    assert len(looked_up - {"held"}) == 2 and len(unread) == 1
    assert looked_up | unread == {"held", "x", "y", "z"}
    assert session.unheld_checks_left == 0
    again = [_request("held", "p", "q")]
    assert heartbeats.screen([session], again) == [{"p", "q"}]
    assert again[0].attempt_ids == ["held"]


def test_the_answer_adopts_what_was_renewed_and_drops_what_was_lost() -> None:
    session = _session({"mine", "ended"}, 1)
    request = _request("mine", "ended", "earlier")
    answer = heartbeats.answered(session, request, HeartbeatAnswer({"ended"}, 1_000), unread={"made-up"})
    assert answer.lost == {"ended", "made-up"}
    assert session.held == {"mine", "earlier"}


def _with_progress(progress: dict[str, str], *attempt_ids: str) -> HeartbeatRequest:
    return HeartbeatRequest(list(attempt_ids), 60_000, WorkerIdentity("w", None, None), progress)


def test_progress_goes_to_the_store_only_when_it_changed_and_only_for_renewed_attempts() -> None:
    session = _session({"a", "b"}, 0)
    reports = {"a": '[1, 2, ""]', "b": '[5, null, ""]', "x": '[9, null, ""]'}
    requests = [_with_progress(reports, "a", "b", "x")]
    (unread,) = heartbeats.screen([session], requests)
    assert unread == {"x"}
    assert requests[0].progress == {"a": '[1, 2, ""]', "b": '[5, null, ""]'}  # x: dropped unread
    heartbeats.answered(session, requests[0], HeartbeatAnswer({"b"}, 1_000), unread)
    assert session.progress_written == {"a": '[1, 2, ""]'}  # b was lost: nothing of it kept

    again = [_with_progress({"a": '[1, 2, ""]'}, "a")]
    heartbeats.screen([session], again)
    assert again[0].progress == {}  # unchanged: no write
    changed = [_with_progress({"a": '[2, 2, ""]'}, "a")]
    heartbeats.screen([session], changed)
    assert changed[0].progress == {"a": '[2, 2, ""]'}

"""Job states and attempt outcomes: one definition per audience, and they agree.

- the domain's ``JobState`` / ``Outcome`` (``coordinator.domain.states``): the coordinator;
- the SDK's public ``JobState`` / ``Outcome`` (``worker_sdk``): users;
- the proto enums ``runwick.v1.JobState`` / ``runwick.v1.Outcome``: the wire, where every
  member is ``<PREFIX><NAME>`` and the zero value ``<PREFIX>UNSPECIFIED`` means "unset".

Adding a state or an outcome means adding it to all three; these tests say which is behind.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest

import worker_sdk
from coordinator.api import convert as coordinator_convert
from coordinator.domain import states as domain
from worker_sdk import _convert as sdk_convert
from worker_sdk import _pipeline
from worker_sdk.proto.runwick.v1 import job_pb2

# (domain enum, SDK enum, proto enum wrapper, wire prefix)
FAMILIES = [
    pytest.param(domain.JobState, worker_sdk.JobState, job_pb2.JobState, "JOB_STATE_", id="JobState"),
    pytest.param(domain.Outcome, worker_sdk.Outcome, job_pb2.Outcome, "OUTCOME_", id="Outcome"),
]


def _wire_members(wrapper: Any, prefix: str) -> dict[str, int]:
    """The proto enum's members by name without the prefix, UNSPECIFIED left out."""
    items: list[tuple[str, int]] = wrapper.items()
    assert all(name.startswith(prefix) for name, _ in items), items
    members = {name.removeprefix(prefix): number for name, number in items}
    assert members.pop("UNSPECIFIED") == 0, "the zero value is UNSPECIFIED"
    return members


@pytest.mark.parametrize(("ours", "sdk", "wire", "prefix"), FAMILIES)
def test_the_domain_the_sdk_and_the_wire_have_the_same_members(
    ours: type[StrEnum], sdk: type[StrEnum], wire: Any, prefix: str
) -> None:
    wire_members = _wire_members(wire, prefix)
    domain_members = {member.name: member.value for member in ours}
    sdk_members = {member.name: member.value for member in sdk}
    assert list(domain_members) == list(sdk_members), "same names in the same order"
    assert domain_members == sdk_members, "same values"
    assert set(domain_members) == set(wire_members), "the wire has the same members"
    # The wire numbers follow the declaration order, from 1.
    assert [wire_members[name] for name in domain_members] == list(range(1, len(domain_members) + 1))


@pytest.mark.parametrize(("ours", "sdk", "wire", "prefix"), FAMILIES)
def test_every_value_is_its_lowercased_name(
    ours: type[StrEnum], sdk: type[StrEnum], wire: Any, prefix: str
) -> None:
    """The text form (stored in the database, shown by the CLI, metrics labels) is the
    member name in lower case, on both sides."""
    for enum in (ours, sdk):
        assert all(member.value == member.name.lower() for member in enum), enum


def test_the_two_sides_agree_on_which_states_are_terminal() -> None:
    assert {s.name for s in domain.JobState if s.terminal} == {
        s.name for s in worker_sdk.JobState if s.terminal
    }
    assert {s.name for s in domain.TERMINAL_STATES} == {"SUCCEEDED", "FAILED", "CANCELLED"}


# --- the converters map every member ---------------------------------------------------


def test_the_coordinator_converts_every_state_both_ways() -> None:
    for state in domain.JobState:
        number = coordinator_convert.state_to_pb(state)
        assert job_pb2.JobState.Name(number) == f"JOB_STATE_{state.name}"
        assert coordinator_convert.state_from_pb(number, "state") is state
    assert coordinator_convert.state_from_pb(job_pb2.JOB_STATE_UNSPECIFIED, "state") is None


def test_the_coordinator_converts_every_outcome_both_ways() -> None:
    wire = _wire_members(job_pb2.Outcome, "OUTCOME_")
    assert set(coordinator_convert.PB_TO_OUTCOME) == set(wire.values())
    for outcome in domain.Outcome:
        number = job_pb2.Outcome.Value(f"OUTCOME_{outcome.name}")
        assert coordinator_convert.PB_TO_OUTCOME[number] is outcome
    assert job_pb2.OUTCOME_UNSPECIFIED not in coordinator_convert.PB_TO_OUTCOME


def test_the_sdk_converts_every_state_both_ways() -> None:
    for state in worker_sdk.JobState:
        number = sdk_convert.state_to_proto(state)
        assert job_pb2.JobState.Name(number) == f"JOB_STATE_{state.name}"
        assert sdk_convert.state_from_proto(number) is state


def test_the_sdk_converts_every_outcome_both_ways() -> None:
    for outcome in worker_sdk.Outcome:
        number = sdk_convert.outcome_to_proto(outcome)
        assert job_pb2.Outcome.Name(number) == f"OUTCOME_{outcome.name}"
        assert sdk_convert.outcome_from_proto(number) is outcome
    assert sdk_convert.outcome_from_proto(job_pb2.OUTCOME_UNSPECIFIED) is None


def test_a_state_or_outcome_crosses_the_wire_unchanged() -> None:
    """SDK -> wire -> coordinator and back gives the member of the same name."""
    for sdk_state in worker_sdk.JobState:
        ours = coordinator_convert.state_from_pb(sdk_convert.state_to_proto(sdk_state), "state")
        assert ours is not None and ours.name == sdk_state.name
        assert sdk_convert.state_from_proto(coordinator_convert.state_to_pb(ours)) is sdk_state
    for sdk_outcome in worker_sdk.Outcome:
        ours_outcome = coordinator_convert.PB_TO_OUTCOME[sdk_convert.outcome_to_proto(sdk_outcome)]
        assert ours_outcome.name == sdk_outcome.name


# --- codes both sides assign -----------------------------------------------------------


def test_the_sdk_assigns_the_codes_the_domain_defaults_to() -> None:
    """The SDK's own codes for a timeout, a cancel, a shutdown, an undecodable payload and
    an output over the bound are the domain's (R-4, R-5, R-6)."""
    assert _pipeline.CODE_TIMEOUT == domain.CODE_TIMEOUT == domain.DEFAULT_CODES[domain.Outcome.TIMED_OUT]
    assert _pipeline.CODE_CANCELLED == domain.CODE_CANCELLED == domain.DEFAULT_CODES[domain.Outcome.CANCELLED]
    assert (
        _pipeline.CODE_WORKER_SHUTDOWN
        == domain.CODE_WORKER_SHUTDOWN
        == domain.DEFAULT_CODES[domain.Outcome.INTERRUPTED]
    )
    assert _pipeline.CODE_PAYLOAD_UNDECODABLE == domain.CODE_PAYLOAD_UNDECODABLE
    assert _pipeline.CODE_OUTPUT_TOO_LARGE == domain.CODE_OUTPUT_TOO_LARGE

"""A cancel is shown as pending only while the run it reached has not ended: the
``cancel_requested`` flag stays set afterwards, and "cancelled (cancel requested)" misled."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.domain.states import JobState
from tests.unit.domain_doubles import job_view
from worker_sdk import JobInfo, JobSettings
from worker_sdk import JobState as SdkJobState


@pytest.mark.parametrize("state", list(JobState))
def test_a_record_shows_a_cancel_pending_only_until_the_job_ends(state: JobState) -> None:
    record = job_view(state, cancel_requested=True)
    assert record.cancel_pending is (not state.terminal)
    assert job_view(state, cancel_requested=False).cancel_pending is False


@pytest.mark.parametrize("state", list(SdkJobState))
def test_the_sdk_shows_a_cancel_pending_only_until_the_job_ends(state: SdkJobState) -> None:
    info = JobInfo(
        id="j",
        wire_name="w",
        queue="q",
        state=state,
        payload=b"",
        payload_version=1,
        priority=0,
        settings=JobSettings(),
        executions=1,
        unstarted_abandonments=0,
        generation=1,
    )
    assert info.cancel_pending is False
    asked = dataclasses.replace(info, cancel_requested=True)
    assert asked.cancel_pending is (
        state not in (SdkJobState.SUCCEEDED, SdkJobState.FAILED, SdkJobState.CANCELLED)
    )

"""``runwick schedules create|list|pause|resume|delete`` end to end (R-18): each command
a real subprocess against a real coordinator, for people and for scripts."""

from __future__ import annotations

import json

import pytest

from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator

pytestmark = pytest.mark.slow


async def test_schedules_commands_for_people_and_scripts(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    created = await runwick(
        *("schedules", "create", "nightly-report", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin"),
        *("--wire-name", "reports.nightly", "--payload", '{"kind": "daily"}', "--queue", "reports"),
        *("--catch-up", "run_once", "--json", *target),
    )
    schedule = json.loads(created.stdout)["schedule"]
    assert schedule["name"] == "nightly-report"
    assert (schedule["cron"], schedule["timezone"], schedule["queue"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        "reports",
    )
    assert schedule["catch_up"] == "run_once"
    assert (schedule["payload"], schedule["payload_base64"]) == ({"kind": "daily"}, None)
    assert len(schedule["next_runs"]) == 3 and schedule["next_runs"][0].endswith(":30:00.000Z")
    assert (schedule["paused"], schedule["skipped_ticks"], schedule["last_tick"]) == (False, [], None)

    hourly = await runwick(
        "schedules",
        "create",
        "hourly",
        "--cron",
        "@hourly",
        "--timezone",
        "UTC",
        "--wire-name",
        "r.h",
        *target,
    )
    assert hourly.stdout.startswith("created schedule hourly; next runs ")

    table = (await runwick("schedules", "list", *target)).stdout.strip().splitlines()
    assert table[0].split()[:3] == ["name", "cron", "wire"]
    assert [line.split()[0] for line in table[1:]] == ["hourly", "nightly-report"]
    wide = (await runwick("schedules", "list", "--output", "wide", *target)).stdout.strip().splitlines()
    assert wide[0].split()[:3] == ["name", "cron", "timezone"]
    assert "run_once" in wide[2] and "active" in wide[2] and "Europe/Berlin" in wide[2]

    paused = await runwick("schedules", "pause", "nightly-report", *target)
    assert paused.stdout.strip() == "paused schedule nightly-report"
    listed = json.loads((await runwick("schedules", "list", "--json", *target)).stdout)["schedules"]
    assert [(s["name"], s["paused"], len(s["next_runs"])) for s in listed] == [
        ("hourly", False, 3),
        ("nightly-report", True, 0),
    ]
    resumed = await runwick("schedules", "resume", "nightly-report", *target)
    assert resumed.stdout.startswith("resumed schedule nightly-report; next runs ")
    deleted = json.loads((await runwick("schedules", "delete", "hourly", "--json", *target)).stdout)
    assert deleted["schedule"]["name"] == "hourly"
    remaining = json.loads((await runwick("schedules", "list", "--json", *target)).stdout)["schedules"]
    assert [s["name"] for s in remaining] == ["nightly-report"]


async def test_schedules_commands_report_bad_input_clearly(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    base = ("schedules", "create", "nightly", "--wire-name", "reports.nightly", *target)
    await runwick(*base, "--cron", "0 3 * * *", "--timezone", "UTC")

    bad_cron = await runwick(*base, "--cron", "61 * * * *", "--timezone", "UTC", check=False)
    assert bad_cron.returncode == 2  # bad input, found by the coordinator
    assert (
        "INVALID_ARGUMENT" in bad_cron.stderr
        and "cron" in bad_cron.stderr
        and "'61 * * * *'" in bad_cron.stderr
    )
    bad_zone = await runwick(*base, "--cron", "0 3 * * *", "--timezone", "Europe/Nowhere", check=False)
    assert bad_zone.returncode == 2
    assert "timezone" in bad_zone.stderr and "'Europe/Nowhere'" in bad_zone.stderr
    taken = await runwick(*base, "--cron", "0 4 * * *", "--timezone", "UTC", check=False)
    assert taken.returncode == 1 and "ALREADY_EXISTS" in taken.stderr and "'nightly'" in taken.stderr
    unknown = await runwick("schedules", "pause", "no-such-schedule", *target, check=False)
    assert (
        unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr and "'no-such-schedule'" in unknown.stderr
    )
    bad_payload = await runwick(
        *base, "--cron", "0 3 * * *", "--timezone", "UTC", "--payload", "{nope", check=False
    )
    assert bad_payload.returncode == 2 and "--payload is not JSON" in bad_payload.stderr
    bad_policy = await runwick(
        *base, "--cron", "0 3 * * *", "--timezone", "UTC", "--catch-up", "sometimes", check=False
    )
    assert bad_policy.returncode == 2 and "--catch-up" in bad_policy.stderr

    [kept] = json.loads((await runwick("schedules", "list", "--json", *target)).stdout)["schedules"]
    assert (kept["name"], kept["cron"], kept["timezone"]) == ("nightly", "0 3 * * *", "UTC")

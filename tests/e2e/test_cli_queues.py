"""``runwick queues`` end to end: list (table and JSON), pause, resume, limit, and bad
input with a clear message and exit code."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker

pytestmark = pytest.mark.slow


async def test_queues_list_pause_resume_and_limit(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    await runwick("jobs", "enqueue", "billing.invoice", "--queue", "billing", *target)
    await runwick("jobs", "enqueue", "billing.invoice", "--queue", "billing", *target)

    listed = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert [(q["name"], q["paused"], q["concurrency_limit"], q["counts"]["available"]) for q in listed] == [
        ("billing", False, None, 2)
    ]
    assert listed[0]["oldest_available_age_s"] >= 0

    paused = await runwick("queues", "pause", "billing", *target)
    assert paused.stdout.strip() == "billing  paused, limit none, per-key limit none"
    limited = json.loads((await runwick("queues", "limit", "billing", "3", "--json", *target)).stdout)[
        "queue"
    ]
    assert (limited["paused"], limited["concurrency_limit"]) == (True, 3)
    await runwick("queues", "resume", "billing", *target)
    cleared = await runwick("queues", "limit", "billing", "none", *target)
    assert cleared.stdout.strip() == "billing  running, limit none, per-key limit none"

    table = (await runwick("queues", "list", *target)).stdout.splitlines()
    assert table[0].split()[:3] == ["queue", "paused", "limit"]
    assert table[1].split()[:3] == ["billing", "-", "-"]


async def test_queue_commands_refuse_bad_input(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    await runwick("jobs", "enqueue", "billing.invoice", "--queue", "billing", *target)

    unknown = await runwick("queues", "pause", "nowhere", *target, check=False)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr and "nowhere" in unknown.stderr
    zero = await runwick("queues", "limit", "billing", "0", *target, check=False)
    assert zero.returncode == 2 and "INVALID_ARGUMENT: limit" in zero.stderr and "got 0" in zero.stderr
    word = await runwick("queues", "limit", "billing", "many", *target, check=False)
    assert word.returncode == 2 and "'many'" in word.stderr
    listed = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert (listed[0]["paused"], listed[0]["concurrency_limit"]) == (False, None)


async def test_queues_list_pages_and_delete_refuses_a_queue_with_jobs(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    ids = {}
    for name in ("c", "a", "b"):
        enqueued = await runwick("jobs", "enqueue", "billing.invoice", "--queue", name, "--json", *target)
        ids[name] = json.loads(enqueued.stdout)["enqueued"]["id"]

    first = await runwick("queues", "list", "--limit", "2", "--json", *target)
    page = json.loads(first.stdout)
    assert [q["name"] for q in page["queues"]] == ["a", "b"] and page["next_page_token"]
    rest = json.loads(
        (await runwick("queues", "list", "--page-token", page["next_page_token"], "--json", *target)).stdout
    )
    assert [q["name"] for q in rest["queues"]] == ["c"] and rest["next_page_token"] == ""
    table = await runwick("queues", "list", "--limit", "1", *target)
    assert "--page-token" in table.stderr  # the table says how to get the next page
    every = json.loads((await runwick("queues", "list", "--all", "--json", *target)).stdout)["queues"]
    assert [q["name"] for q in every] == ["a", "b", "c"]

    busy = await runwick("queues", "delete", "a", *target, check=False)
    assert busy.returncode == 1 and "FAILED_PRECONDITION" in busy.stderr and "1 available" in busy.stderr
    await runwick("jobs", "cancel", ids["a"], *target)
    await runwick("purge", "--state", "cancelled", "--older-than", "0", "--yes", *target)
    deleted = await runwick("queues", "delete", "a", *target)
    assert deleted.stdout.strip() == "a  deleted (an enqueue to it makes it again)"
    every = json.loads((await runwick("queues", "list", "--all", "--json", *target)).stdout)["queues"]
    assert [q["name"] for q in every] == ["b", "c"]
    unknown = await runwick("queues", "delete", "a", *target, check=False)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr and "does not exist" in unknown.stderr


async def test_concurrency_keys_and_per_key_limits_from_the_cli(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    made = await runwick(
        "jobs",
        "enqueue",
        "billing.invoice",
        "--queue",
        "billing",
        "--concurrency-key",
        "tenant:42",
        "--json",
        *target,
    )
    job_id = json.loads(made.stdout)["enqueued"]["id"]
    shown = json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)["job"]
    assert shown["concurrency_key"] == "tenant:42"
    text = (await runwick("jobs", "get", job_id, *target)).stdout.splitlines()
    assert ["concurrency", "key", "tenant:42"] in [line.split() for line in text]
    listed = json.loads((await runwick("jobs", "list", "--json", *target)).stdout)["jobs"]
    assert [j["concurrency_key"] for j in listed] == ["tenant:42"]

    per_key = await runwick("queues", "limit", "billing", "2", "--per-key", *target)
    assert per_key.stdout.strip() == "billing  running, limit none, per-key limit 2"
    assert (
        json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)["job"]["waiting_reason"]
        is None
    )
    queues = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert (queues[0]["key_limit"], queues[0]["concurrency_limit"]) == (2, None)
    table = (await runwick("queues", "list", *target)).stdout.splitlines()
    assert table[0].split()[:5] == ["queue", "paused", "limit", "key", "limit"]
    assert table[1].split()[:4] == ["billing", "-", "-", "2"]

    await runwick("queues", "pause", "billing", *target)
    held = json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)["job"]
    assert held["waiting_reason"] == "queue_paused"
    lines = (await runwick("jobs", "get", job_id, *target)).stdout.splitlines()
    assert ["waiting", "on", "queue_paused"] in [line.split() for line in lines]
    await runwick("queues", "resume", "billing", *target)
    bad = await runwick(
        "jobs", "enqueue", "billing.invoice", "--concurrency-key", "a b", *target, check=False
    )
    assert bad.returncode == 2 and "concurrency_key" in bad.stderr and "'a b'" in bad.stderr
    zero = await runwick("queues", "limit", "billing", "0", "--per-key", *target, check=False)
    assert zero.returncode == 2 and "got 0" in zero.stderr
    missing = await runwick("queues", "limit", "nowhere", "1", "--per-key", *target, check=False)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    after = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert [q["key_limit"] for q in after] == [2]
    assert len(json.loads((await runwick("jobs", "list", "--json", *target)).stdout)["jobs"]) == 1


async def test_queues_rate_sets_shows_and_removes_a_rate(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    await runwick("jobs", "enqueue", "geo.lookup", "--queue", "geocode", *target)

    rated = await runwick("queues", "rate", "geocode", "100/1m", *target)
    assert rated.stdout.strip() == "geocode  running, limit none, per-key limit none, rate 100/1m"
    per_key = json.loads(
        (await runwick("queues", "rate", "geocode", "5/500ms", "--per-key", "--json", *target)).stdout
    )
    assert per_key["queue"]["rate"] == {"count": 5, "period_s": 0.5, "per_key": True}
    table = (await runwick("queues", "list", *target)).stdout.splitlines()
    assert table[0].split()[:6] == ["queue", "paused", "limit", "key", "limit", "rate"]
    assert table[1].split()[:7] == ["geocode", "-", "-", "-", "5/500ms", "per", "key"]

    for bad, says in (
        ("0/1s", "count must be 1"),
        ("10/0s", "period must be"),
        ("abc", "COUNT/PERIOD"),
        ("-5/1s", "COUNT/PERIOD"),
        ("10/30d", "period must be"),
        ("10/1y", "a period is"),
    ):
        refused = await runwick("queues", "rate", *target, "geocode", "--", bad, check=False)
        assert refused.returncode == 2 and says in refused.stderr, (bad, refused.stderr)
    unknown = await runwick("queues", "rate", "nowhere", "1/1s", *target, check=False)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr
    listed = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert listed[0]["rate"] == {"count": 5, "period_s": 0.5, "per_key": True}

    removed = await runwick("queues", "rate", "geocode", "off", *target)
    assert removed.stdout.strip() == "geocode  running, limit none, per-key limit none"


async def test_queues_list_names_the_keys_at_their_limit_or_rate(coordinator: Coordinator) -> None:
    """docs/flow-control.md: the wide table and the JSON count a queue's active keys and
    those at their limit or rate, naming the first few."""
    target = ("--target", coordinator.target)
    for _ in range(3):
        await runwick(
            "jobs", "enqueue", "tests.echo", "--queue", "tenants", "--concurrency-key", "tenant:1", *target
        )
    await runwick("queues", "limit", "tenants", "1", "--per-key", *target)
    await runwick("queues", "rate", "tenants", "1/1h", "--per-key", *target)
    worker = RawWorker(coordinator.target, "keyed", ["tests.echo"], queues=["tenants"])
    try:
        await worker.claim()  # tenant:1 at its limit, and its window full (the claim counts)
        wide = (await runwick("queues", "list", "--output", "wide", *target)).stdout.splitlines()
        assert "keys held" in wide[0]
        assert "full tenant:1; at rate tenant:1" in wide[1]
        assert wide[1].split()[:2] == ["tenants", "-"] and " 1/1 " in wide[1]  # keys active/full
        (listed,) = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
        assert (listed["active_keys"], listed["keys_at_limit"], listed["keys_at_rate"]) == (1, 1, 1)
        assert listed["first_keys_at_limit"] == listed["first_keys_at_rate"] == ["tenant:1"]
    finally:
        await worker.close()


def _fields(text: str) -> dict[str, str]:
    """``name  value`` lines (names aligned, values after two spaces or more)."""
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in text.splitlines() if line.strip())


async def test_queues_get_shows_the_limits_keys_and_what_each_control_holds_back(
    coordinator: Coordinator,
) -> None:
    """Issue 41: one queue's controls, its keys active, at their limit and at their rate
    (named), what each control holds back and its jobs per state, for people and as JSON."""
    target = ("--target", coordinator.target)
    for key in ("tenant:1", "tenant:1", "tenant:1"):
        await runwick(
            "jobs", "enqueue", "tests.echo", "--queue", "tenants", "--concurrency-key", key, *target
        )
    await runwick("queues", "limit", "tenants", "1", "--per-key", *target)
    await runwick("queues", "rate", "tenants", "1/1h", "--per-key", *target)
    worker = RawWorker(coordinator.target, "keyed", ["tests.echo"], queues=["tenants"])
    try:
        await worker.claim()  # tenant:1 at its limit, and its window full
        for _ in range(2):
            await runwick(
                "jobs",
                "enqueue",
                "tests.echo",
                "--queue",
                "tenants",
                "--concurrency-key",
                "tenant:2",
                *target,
            )
        shown = _fields((await runwick("queues", "get", "tenants", *target)).stdout)
        assert {k: v for k, v in shown.items() if k != "oldest due"} == {
            "queue": "tenants",
            "state": "running",
            "limit": "none",
            "per-key limit": "1",
            "rate": "1/1h per key",
            "keys": "1 active, 1 at limit, 1 at rate",
            "keys at limit": "tenant:1",
            "keys at rate": "tenant:1",
            # tenant:1's 2 wait on its limit, tenant:2's second one too; no rate holds any.
            "held back": "key_limit 3, rate 0",
            "runnable now": "1",
            "jobs": "scheduled 0, waiting 0, available 4, reserved 1, running 0",
        }
        assert re.fullmatch(r"\d+\.\ds ago", shown["oldest due"]), shown["oldest due"]
        wide = _fields((await runwick("queues", "get", "tenants", "-o", "wide", *target)).stdout)
        assert wide["jobs"].endswith("running 0, succeeded 0, failed 0, cancelled 0")

        document = json.loads((await runwick("queues", "get", "tenants", "--json", *target)).stdout)
        queue = document["queue"]
        assert (queue["key_limit"], queue["rate"]) == (1, {"count": 1, "period_s": 3600.0, "per_key": True})
        assert (queue["active_keys"], queue["keys_at_limit"], queue["keys_at_rate"]) == (1, 1, 1)
        assert queue["first_keys_at_limit"] == queue["first_keys_at_rate"] == ["tenant:1"]
        assert (queue["held_back"], queue["runnable"]) == ({"key_limit": 3, "rate": 0}, 1)
        assert (queue["counts"]["available"], queue["counts"]["reserved"]) == (4, 1)
        assert queue["oldest_available_age_s"] >= 0
    finally:
        await worker.close()


async def test_queues_get_of_a_plain_queue_and_refusals(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    await runwick("jobs", "enqueue", "billing.invoice", "--queue", "billing", *target)
    await runwick("queues", "pause", "billing", *target)

    shown = _fields((await runwick("queues", "get", "billing", *target)).stdout)
    assert (shown["state"], shown["keys"], shown["keys at limit"]) == (
        "paused (no new claims)",
        "- (no per-key limit or rate)",
        "-",
    )
    assert (shown["held back"], shown["runnable now"]) == ("queue_paused 1", "0")
    await runwick("queues", "resume", "billing", *target)
    free = _fields((await runwick("queues", "get", "billing", *target)).stdout)
    assert (free["held back"], free["runnable now"]) == ("- (no controls)", "1")

    unknown = await runwick("queues", "get", "nowhere", *target, check=False)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr and "'nowhere'" in unknown.stderr
    bad = await runwick("queues", "get", "a b", *target, check=False)
    assert bad.returncode == 2 and "INVALID_ARGUMENT: queue" in bad.stderr, bad.stderr
    listed = json.loads((await runwick("queues", "list", "--json", *target)).stdout)["queues"]
    assert [q["name"] for q in listed] == ["billing"]

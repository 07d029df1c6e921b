"""The dashboard's workers page against a real coordinator (port 0) on both engines and a
worker speaking the stream protocol over gRPC: the host and SDK its Hello carries, its
slots, and its last heartbeat (none while it holds no job). The SDK's own Hello is
checked in the browser tests, against a real worker process."""

from __future__ import annotations

import re

from coordinator.domain.access import SYSTEM_ACTOR
from tests.integration import test_dashboard_http
from tests.integration.rawstream import RawWorker
from tests.integration.test_dashboard_http import Dashboard
from worker_sdk import AsyncClient
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

dashboard = test_dashboard_http.dashboard
"""The fixture: a coordinator with its dashboard, and a token per scope."""
ROW = re.compile(r'<tr data-worker="raw-1">(.*?)</tr>', re.S)


async def test_the_workers_page_shows_host_sdk_slots_and_last_heartbeat(dashboard: Dashboard) -> None:
    app = dashboard.running.app
    token = (await app.create_token("dash-work", ["work"], [], SYSTEM_ACTOR)).token
    target = f"127.0.0.1:{dashboard.running.port}"
    worker = RawWorker(
        target,
        "raw-1",
        ["tests.echo"],
        capacity=3,
        token=token,
        host="build-7.example",
        sdk="runwick-node/0.2",
    )
    try:
        await worker.next("welcome")
        session = await dashboard.session("read")
        idle = ROW.search((await session.get("/workers?fragment=1")).body)
        assert idle is not None
        row = idle.group(1)
        assert (
            "data-worker-host>build-7.example</td>" in row and "data-worker-sdk>runwick-node/0.2</td>" in row
        )
        assert '<td class="num">3</td>' in row and "none yet" in row

        await dashboard.enqueue()
        assignment = await worker.claim()
        worker.send(heartbeat=pb.Heartbeat(attempt_ids=[assignment.attempt_id]))
        await worker.next("heartbeat_answer")

        busy = ROW.search((await session.get("/workers")).body)
        assert busy is not None and "none yet" not in busy.group(1)
        assert re.search(r"data-worker-heartbeat><time data-age datetime=\"[0-9T:.-]+Z\">", busy.group(1))
    finally:
        await worker.close()


async def test_list_workers_names_each_workers_host_and_sdk(dashboard: Dashboard) -> None:
    """``ListWorkers`` (the SDK's ``list_workers``, ``runwick workers list``) tells what
    each Hello said of the worker, and None where it said nothing."""
    app = dashboard.running.app
    token = (await app.create_token("list-work", ["work"], [], SYSTEM_ACTOR)).token
    target = f"127.0.0.1:{dashboard.running.port}"
    named = RawWorker(target, "raw-1", ["tests.echo"], token=token, host="pod-a-7f9c", sdk="runwick-node/0.2")
    unnamed = RawWorker(target, "raw-2", ["tests.echo"], token=token)
    try:
        await named.next("welcome")
        await unnamed.next("welcome")
        async with AsyncClient(target, token=dashboard.tokens["read"]) as client:
            listing = await client.list_workers()
        shown = {w.worker_id: (w.host, w.sdk) for w in listing.workers}
        assert shown == {"raw-1": ("pod-a-7f9c", "runwick-node/0.2"), "raw-2": (None, None)}
    finally:
        await named.close()
        await unnamed.close()

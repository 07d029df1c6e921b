"""How fast the dashboard answers with a large jobs table: every page and every live
refresh, timed over HTTP against a real coordinator.

Fills a scratch database (a SQLite file, or a PostgreSQL URL you name: it is emptied
first) with ``--jobs`` jobs over ``--queues`` queues and every state, a job with a long
attempt history, an hour of per-minute throughput, audit events and schedules; starts a
coordinator on it (authentication on, the dashboard on a free port), signs in, and
requests each URL ``--rounds`` times, printing the median, the 95th percentile and the
slowest in milliseconds. Speed is measured here, never asserted in the test suite.

    python benchmarks/dashboard.py --jobs 1000000
    python benchmarks/dashboard.py --database-url postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import random
import re
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from sqlalchemy import create_engine, insert, text

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.ids import uuid7
from coordinator.domain.states import JobState
from coordinator.process import start_coordinator
from coordinator.store import Store
from coordinator.store.schema import (
    attempts,
    audit_events,
    jobs,
    metadata,
    queue_count_deltas,
    queue_finished,
    queues,
    schedules,
)

# Most jobs of a busy system have ended; a backlog waits; a few run.
_STATE_WEIGHTS = {
    JobState.SUCCEEDED: 80,
    JobState.FAILED: 4,
    JobState.CANCELLED: 1,
    JobState.AVAILABLE: 10,
    JobState.SCHEDULED: 3,
    JobState.WAITING: 1,
    JobState.RESERVED: 0.5,
    JobState.RUNNING: 0.5,
}
_WIRE_NAMES = ["bench.noop"] * 8 + ["bench.report", "bench.mail"]
"""The last two are each a twentieth of the jobs; ``bench.rare`` is one job."""
HOUR_MS = 3_600_000
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _job_row(
    job_id: str, state: JobState, queue: str, wire_name: str, now: int, rng: random.Random
) -> dict[str, object]:
    leased = state in (JobState.RESERVED, JobState.RUNNING)
    return {
        "id": job_id,
        "wire_name": wire_name,
        "queue": queue,
        "state": state.value,
        "priority": 0,
        "run_at_ms": now - rng.randrange(HOUR_MS),
        "payload": b'{"order_id": "o-12345", "amount": 1999}',
        "payload_version": 1,
        "max_executions": 3,
        "retry_initial_delay_ms": 5_000,
        "retry_max_delay_ms": 60_000,
        "max_unstarted_abandonments": 5,
        "unstarted_initial_delay_ms": 1_000,
        "unstarted_max_delay_ms": 30_000,
        "generation": 1,
        "executions": 1 if state.terminal or leased else 0,
        "unstarted_streak": 0,
        "worker_id": f"worker-{rng.randrange(40)}" if leased else None,
        # Far off: these leases have no attempt rows, so lease expiry must not find them.
        "lease_expires_at_ms": now + 24 * HOUR_MS if leased else None,
        "created_at_ms": now,
        "updated_at_ms": now,
        "finished_at_ms": now - rng.randrange(HOUR_MS) if state.terminal else None,
        "last_error_code": "InventoryError" if state is JobState.FAILED else None,
        "history_seq": 1,
        "cancel_requested": False,
    }


def fill(url: str, count: int, queue_count: int, seed: int) -> str:
    """Fills the database; returns the ID of the job with a long attempt history."""
    rng = random.Random(seed)
    names = [f"queue-{n}" for n in range(queue_count)]
    states, weights = list(_STATE_WEIGHTS), list(_STATE_WEIGHTS.values())
    engine = create_engine(url)
    now = int(time.time() * 1000)
    with engine.begin() as conn:
        conn.execute(
            insert(queues),
            [{"name": n, "paused": False, "created_at_ms": now, "updated_at_ms": now} for n in names],
        )
    batch = 20_000
    for start in range(0, count, batch):
        rows = []
        for n in range(min(batch, count - start)):
            created = now - (count - start - n) * 5  # time-ordered IDs, as enqueues make them
            rows.append(
                _job_row(
                    uuid7(created),
                    rng.choices(states, weights)[0],
                    rng.choice(names),
                    rng.choice(_WIRE_NAMES),
                    now,
                    rng,
                )
            )
        with engine.begin() as conn:
            conn.execute(insert(jobs), rows)
    # One job that failed after many attempts over several generations, and a rare type.
    busy = uuid7(now)
    with engine.begin() as conn:
        row = _job_row(busy, JobState.FAILED, names[0], "bench.noop", now, rng)
        conn.execute(insert(jobs), [{**row, "generation": 10, "executions": 3}])
        conn.execute(
            insert(jobs),
            [_job_row(uuid7(now - 10 * HOUR_MS), JobState.SUCCEEDED, names[1], "bench.rare", now, rng)],
        )
        conn.execute(
            insert(attempts),
            [
                {
                    "id": uuid7(now - 1000 * n),
                    "job_id": busy,
                    "generation": 1 + n // 3,
                    "worker_id": f"worker-{n % 7}",
                    "execution_number": 1 + n % 3,
                    "claimed_at_ms": now - 1000 * (30 - n),
                    "started_at_ms": now - 1000 * (30 - n) + 5,
                    "finished_at_ms": now - 1000 * (30 - n) + 300,
                    "outcome": "retryable_failure",
                    "error_code": "InventoryError",
                    "exception_type": "myapp.InventoryError",
                    "message": "out of stock",
                    "detail": "Traceback (most recent call last):\n" * 50,
                    "retry_delay_ms": 5_000,
                    "job_state_after": "scheduled",
                    "reported": True,
                }
                for n in range(30)
            ],
        )
        # The maintained counts, as the migration counts them, plus a second's unfolded deltas.
        conn.execute(
            text(
                "INSERT INTO queue_counts (queue, state, count) "
                "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
            )
        )
        conn.execute(
            insert(queue_count_deltas),
            [{"queue": rng.choice(names), "state": "available", "delta": 1} for _ in range(2_000)],
        )
        minute = now - now % 60_000
        conn.execute(
            insert(queue_finished),
            [
                {"minute_ms": minute - 60_000 * m, "queue": q, "state": s, "count": rng.randrange(50, 500)}
                for m in range(24 * 60)
                for q in names
                for s in ("succeeded", "failed", "cancelled")
            ],
        )
        conn.execute(
            insert(audit_events),
            [
                {
                    "at_ms": now - n * 1000,
                    "actor_token_id": "0123456789abcdef",
                    "actor_name": "ops",
                    "action": "job.retry",
                    "target": str(uuid7(now)),
                    "peer": "ipv4:10.0.0.7:51234",
                    "detail": "failed, generation 1 -> 2",
                }
                for n in range(10_000)
            ],
        )
        conn.execute(
            insert(schedules),
            [
                {
                    "name": f"schedule-{n}",
                    "cron": "*/5 * * * *",
                    "timezone": "Europe/Berlin",
                    "wire_name": "bench.noop",
                    "payload": b"{}",
                    "queue": names[n % len(names)],
                    "catch_up": "skip",
                    "paused": False,
                    "created_at_ms": now,
                    "updated_at_ms": now,
                    "next_tick_ms": now + 3_600_000,
                }
                for n in range(50)
            ],
        )
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    engine.dispose()
    return busy


class Browser:
    """One keep-alive HTTP connection with the session cookie, timing each request."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, body: str | None = None, **headers: str
    ) -> tuple[int, str, dict[str, str]]:
        sent = dict(headers)
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        self.conn.request(method, path, body=body, headers=sent)
        response = self.conn.getresponse()
        data = response.read().decode()
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return response.status, data, {k.lower(): v for k, v in response.getheaders()}

    def sign_in(self, token: str) -> None:
        _, page, _ = self.request("GET", "/signin")
        found = CSRF.search(page)
        assert found is not None
        status, _, _ = self.request("POST", "/signin", urlencode({"csrf": found.group(1), "token": token}))
        assert status == 303, status

    def time(self, path: str, rounds: int, *, conditional: bool = False) -> list[float]:
        status, _, headers = self.request("GET", path)  # warm, and the ETag a live region holds
        assert status == 200, (path, status)
        extra = {"If-None-Match": headers["etag"]} if conditional and "etag" in headers else {}
        timings = []
        for _ in range(rounds):
            started = time.perf_counter()
            status, _, _ = self.request("GET", path, **extra)
            timings.append((time.perf_counter() - started) * 1000)
            assert status in (200, 304), (path, status)
        return timings


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def measure(port: int, token: str, busy_job: str, rounds: int) -> list[tuple[str, list[float]]]:
    browser = Browser(port)
    browser.sign_in(token)
    _, listing, _ = browser.request("GET", "/jobs")
    next_page = re.search(r'href="(/jobs\?page=[^"]+)"', listing)
    assert next_page is not None
    paths = [
        "/",
        "/?fragment=1",
        "/jobs",
        "/jobs?fragment=1",
        next_page.group(1).replace("&amp;", "&"),
        "/jobs?state=failed",
        "/jobs?state=running&queue=queue-3",
        "/jobs?queue=queue-7",
        "/jobs?wire_name=bench.report",
        "/jobs?wire_name=bench.rare",
        # The search (docs/dashboard.md, "Searching jobs"): what no index answers reads
        # a bounded window; a text that matches nothing reads the whole window.
        "/jobs?text=no-such-text",
        "/jobs?text=o-12345&queue=queue-3",
        "/jobs?key=no-such-key",
        "/jobs?unique_key=no-such-key&state=succeeded",
        f"/jobs?id_prefix={busy_job[:8]}",
        "/jobs?created_after=2000-01-01&created_before=2100-01-01",
        "/jobs?sort=run_at&order=asc",
        "/jobs?sort=finished&state=failed",
        "/jobs/bulk/cancel?queue=queue-3",
        "/jobs/bulk/retry?state=failed&wire_name=bench.report",
        f"/jobs/{busy_job}",
        f"/jobs/{busy_job}?fragment=1",
        "/failed",
        "/failed?queue=queue-2&fragment=1",
        "/queues",
        "/queues?fragment=1",
        "/schedules",
        "/workers?fragment=1",
        "/audit",
    ]
    results = [(path, browser.time(path, rounds)) for path in paths]
    results.append(
        ("/queues?fragment=1 (unchanged: 304)", browser.time("/queues?fragment=1", rounds, conditional=True))
    )
    return results


async def run(url: str, rounds: int, busy_job: str) -> list[tuple[str, list[float]]]:
    config = CoordinatorConfig(
        database_url=url, port=0, dashboard_port=0, auth_enabled=True, health_port=None, metrics_port=None
    )
    running = await start_coordinator(config)
    try:
        token = (await running.app.create_token("bench", ["read", "manage", "admin"], [], SYSTEM_ACTOR)).token
        assert running.dashboard_port is not None
        return await asyncio.to_thread(measure, running.dashboard_port, token, busy_job, rounds)
    finally:
        await running.stop(grace_s=1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = options.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        store = Store.open(url, create=True)
        normalized, postgres = store.url, store.postgres
        store.close()
        if postgres:
            engine = create_engine(normalized)
            with engine.begin() as conn:
                names = ", ".join(t.name for t in metadata.sorted_tables)
                # The audit log refuses TRUNCATE; lifted inside this transaction only.
                conn.execute(text("ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_truncate"))
                conn.execute(text(f"TRUNCATE {names}"))
                conn.execute(text("ALTER TABLE audit_events ENABLE TRIGGER audit_events_no_truncate"))
            engine.dispose()
        began = time.perf_counter()
        busy = fill(normalized, options.jobs, options.queues, seed=1)
        print(
            f"filled {options.jobs:,} jobs in {options.queues} queues in {time.perf_counter() - began:.0f} s"
        )
        results = asyncio.run(run(url, options.rounds, busy))
        engine_name = "postgresql" if postgres else "sqlite"
        print(f"{engine_name}, {options.rounds} requests each (ms):")
        print(f"{'page':<48} {'median':>8} {'p95':>8} {'max':>8}")
        for path, timings in results:
            print(f"{path:<48} {statistics.median(timings):8.1f} {_p95(timings):8.1f} {max(timings):8.1f}")
        worst = max(results, key=lambda r: _p95(r[1]))
        print(f"slowest p95: {worst[0]} {_p95(worst[1]):.1f} ms")


if __name__ == "__main__":
    main()

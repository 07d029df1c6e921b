"""A real Prometheus (Debian's ``prometheus`` package, run here on loopback with its own
config and storage) scrapes a coordinator and a worker process through a small workload.

The tools must be installed (``tests/run.sh`` installs them): a missing one fails the
test, it is never skipped. The system's own Prometheus service, if any, is not used.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.test_tls import Pki, pki  # noqa: F401 - the certificates fixture
from tests.integration.worker_app import Echo, Permanent
from tests.support import (
    ROOT,
    WorkerProcess,
    eventually_async,
    free_port,
    start_process,
    stop,
    tool,
    wait_for_line,
)
from worker_sdk import AsyncClient, JobState

pytestmark = pytest.mark.slow

RULES = ROOT / "deploy" / "prometheus" / "runwick-rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "runwick-dashboard.json"
ECHO_JOBS = 8
PERMANENT = 'wire_name="tests.permanent", outcome="permanent_failure"'
ENQUEUE_OK = 'grpc_method="runwick.v1.JobService/Enqueue", grpc_code="OK"'


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


def promtool_check_metrics(exposition: bytes) -> None:
    checked = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=exposition, capture_output=True, timeout=30, check=False
    )
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


@dataclass
class Prometheus:
    process: subprocess.Popen[str]
    url: str

    def query(self, promql: str) -> dict[str, Any]:
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        answer: dict[str, Any] = json.loads(http_get(address))
        assert answer["status"] == "success", answer
        return answer["data"]  # type: ignore[no-any-return]

    def values(self, promql: str) -> list[float]:
        return [float(item["value"][1]) for item in self.query(promql)["result"]]


@pytest.fixture
async def prometheus_factory(tmp_path: Path) -> AsyncIterator[Callable[[dict[str, str]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, str], scrape_configs: Sequence[dict[str, Any]] = ()) -> Prometheus:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in targets.items()
            ]
            + list(scrape_configs),
        }
        config_path = tmp_path / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        port = free_port()
        process = start_process(
            [
                tool("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            tmp_path / "prometheus.log",
        )
        server = Prometheus(process, f"http://127.0.0.1:{port}")
        started.append(server)
        return server

    yield start
    for server in started:
        await stop(server.process, grace_s=20)


async def wait_ready(prometheus: Prometheus) -> None:
    async def ready() -> bool:
        assert prometheus.process.poll() is None, "prometheus exited; see prometheus.log"
        try:
            await asyncio.to_thread(http_get, f"{prometheus.url}/-/ready")
        except OSError:
            return False
        return True

    await eventually_async(ready, timeout=30, interval=0.1, what="prometheus to be ready")


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    return [expr.replace("$queue", ".*").replace("$__rate_interval", "1m") for expr in exprs]


def rule_queries() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


async def test_prometheus_scrapes_coordinator_and_worker(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], prometheus_factory: Callable[..., Prometheus]
) -> None:
    running: RunningCoordinator = await start_coordinator(
        CoordinatorConfig(
            database_url=f"sqlite:///{tmp_path / 'runwick.db'}",
            port=0,
            metrics_port=0,
            health_check_interval_s=0.5,
        )
    )
    try:
        worker = spawn_worker(running.target, test_metrics_port=0, runwick_log_format="json")
        await wait_for_line(worker.process, worker.log_path, "worker metrics on")
        [worker_port] = re.findall(r"worker metrics on http://127\.0\.0\.1:(\d+)/metrics", worker.log())
        coordinator_metrics = f"127.0.0.1:{running.metrics_port}"
        worker_metrics = f"127.0.0.1:{worker_port}"
        prometheus = prometheus_factory(
            {"runwick-coordinator": coordinator_metrics, "runwick-worker": worker_metrics}
        )

        async with AsyncClient(running.target) as client:
            job_ids = [await client.enqueue(Echo(f"n{n}")) for n in range(ECHO_JOBS)]
            job_ids.append(await client.enqueue(Permanent("o-404")))
            states = [(await client.wait(job_id, timedelta(seconds=30))).state for job_id in job_ids]
        assert states == [JobState.SUCCEEDED] * ECHO_JOBS + [JobState.FAILED]

        for target in (coordinator_metrics, worker_metrics):
            promtool_check_metrics(await asyncio.to_thread(http_get, f"http://{target}/metrics"))

        await wait_ready(prometheus)

        async def scraped_final_counts() -> bool:
            done = await asyncio.to_thread(
                prometheus.values, 'sum(runwick_jobs_completed_total{outcome="succeeded"})'
            )
            ran = await asyncio.to_thread(prometheus.values, "sum(runwick_worker_jobs_total)")
            return done == [ECHO_JOBS] and ran == [ECHO_JOBS + 1]

        await eventually_async(
            scraped_final_counts, timeout=30, interval=0.25, what="the final counts to be scraped"
        )

        expected = {
            'up{job="runwick-coordinator"}': [1],
            'up{job="runwick-worker"}': [1],
            'runwick_jobs_enqueued_total{queue="default", wire_name="tests.echo"}': [ECHO_JOBS],
            'runwick_jobs_completed_total{wire_name="tests.permanent", outcome="failed"}': [1],
            f"runwick_job_run_duration_seconds_count{{{PERMANENT}}}": [1],
            "sum(runwick_job_wait_seconds_count)": [ECHO_JOBS + 1],
            'runwick_connected_workers{queue="default"}': [1],
            f"runwick_grpc_server_handled_total{{{ENQUEUE_OK}}}": [ECHO_JOBS + 1],
            "runwick_database_up": [1],
            'runwick_worker_jobs_total{wire_name="tests.echo", outcome="succeeded"}': [ECHO_JOBS],
            f"runwick_worker_jobs_total{{{PERMANENT}}}": [1],
            "sum(runwick_worker_handler_duration_seconds_count)": [ECHO_JOBS + 1],
            "sum(runwick_worker_jobs_in_flight)": [0],
            "runwick_worker_connected_streams": [1],
        }
        for promql, values in expected.items():
            assert await asyncio.to_thread(prometheus.values, promql) == values, promql

        async def queue_series_gone() -> bool:
            # Every job ended: the queue has no jobs, so its gauges lose their series
            # (at the next background read, every 5 s).
            gauges = ("runwick_queue_depth", "runwick_queue_oldest_available_job_age_seconds")
            found = [
                await asyncio.to_thread(prometheus.values, f'{name}{{queue="default"}}') for name in gauges
            ]
            return found == [[], []]

        await eventually_async(
            queue_series_gone, timeout=30, interval=0.25, what="the empty queue's gauges to go"
        )
        for promql in ("runwick_store_transaction_seconds_count", "process_resident_memory_bytes"):
            [value] = await asyncio.to_thread(prometheus.values, f'{promql}{{job="runwick-coordinator"}}')
            assert value > 0, promql
        # Every alert and dashboard query is valid PromQL over series that exist.
        for promql in rule_queries() + dashboard_queries():
            await asyncio.to_thread(prometheus.query, promql)
        assert not await asyncio.to_thread(prometheus.values, 'ALERTS{alertstate="firing"}')
    finally:
        await running.stop(grace_s=1)

    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert any(line.get("message", "").startswith("worker metrics on") for line in lines)
    finished = [line for line in lines if "finished" in line["message"]]
    assert finished and all(line["attempt_id"] and line["job_id"] for line in finished)


async def test_prometheus_scrapes_metrics_over_mutual_tls_with_the_token(
    tmp_path: Path,
    pki: Pki,  # noqa: F811
    prometheus_factory: Callable[..., Prometheus],
) -> None:
    """The scrape configuration docs/metrics.md gives for ``--metrics-tls`` and
    ``--metrics-token-file``; scrapes without the token or over plaintext fail."""
    token = "prometheus-scrape-token-0123456789"
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token + "\n")
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=f"sqlite:///{tmp_path / 'runwick.db'}",
            port=0,
            metrics_port=0,
            auth_enabled=True,
            drain_timeout_s=1,
            tls_cert_file=str(pki.server_cert),
            tls_key_file=str(pki.server_key),
            tls_client_ca_file=str(pki.ca),
            metrics_tls=True,
            metrics_token=token,
        )
    )
    try:
        target = {"static_configs": [{"targets": [f"127.0.0.1:{running.metrics_port}"]}]}
        tls = {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
        bearer = {"credentials_file": str(token_file)}
        prometheus = prometheus_factory(
            {},
            [
                {
                    "job_name": "secured",
                    "scheme": "https",
                    "tls_config": tls,
                    "authorization": bearer,
                    **target,
                },
                {"job_name": "no-token", "scheme": "https", "tls_config": tls, **target},
                {"job_name": "plaintext", "authorization": bearer, **target},
            ],
        )
        await wait_ready(prometheus)

        async def scraped() -> bool:
            ups = {
                job: await asyncio.to_thread(prometheus.values, f'up{{job="{job}"}}')
                for job in ("secured", "no-token", "plaintext")
            }
            return ups == {"secured": [1], "no-token": [0], "plaintext": [0]}

        await eventually_async(scraped, timeout=30, interval=0.25, what="the three scrapes to be tried")
        assert await asyncio.to_thread(prometheus.values, 'runwick_database_up{job="secured"}') == [1]
        assert not await asyncio.to_thread(prometheus.values, 'runwick_database_up{job!="secured"}')
    finally:
        await running.stop(grace_s=1)

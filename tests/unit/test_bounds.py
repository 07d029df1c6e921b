"""docs/limits.md ``StoreBounds``: defaults, ranges, clamps, the gRPC message size they need,
and where ``runwick serve`` takes them from (flags > RUNWICK_* > config file > default)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import subprocess
from pathlib import Path

import pytest

from coordinator.cli import build_parser
from coordinator.cli.bounds import bounds_from_options, env_of, flag_of, load_bounds_table, resolve_bounds
from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.domain import bounds as bounds_module
from coordinator.domain.bounds import MESSAGE_HEADROOM_BYTES, RANGES, BoundsError, StoreBounds
from tests.support import ROOT, runwick_command
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2, worker_service_pb2
from worker_sdk.trace_rules import MAX_TRACESTATE_BYTES

DOCUMENTED_DEFAULTS = {
    "max_payload_bytes": 65_536,
    "max_wire_name_length": 128,
    "max_parents_per_job": 64,
    "max_output_bytes": 65_536,
    "max_failure_detail_bytes": 16_384,
    "max_failure_message_bytes": 1_024,
    "max_claim_batch": 128,
    "max_purge_batch": 1_000,
    "max_page_size": 500,
    "max_history_per_job": 100,
    "max_skipped_ticks": 100,
    "max_enqueue_batch": 500,
    "max_queues": 10_000,
}


def test_s5_defaults_are_the_spec_table() -> None:
    assert dataclasses.asdict(StoreBounds()) == DOCUMENTED_DEFAULTS
    assert CoordinatorConfig().bounds == StoreBounds()


def test_s5_every_bound_has_a_docstring_and_a_range() -> None:
    """One docstring per field."""
    tree = ast.parse(inspect.getsource(bounds_module))
    [cls] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "StoreBounds"]
    documented = {
        field.target.id
        for field, after in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    names = {f.name for f in dataclasses.fields(StoreBounds)}
    assert documented == names
    assert set(RANGES) == names
    for name, (low, high) in RANGES.items():
        assert low <= DOCUMENTED_DEFAULTS[name] <= high, name


@pytest.mark.parametrize("name", sorted(DOCUMENTED_DEFAULTS))
def test_s5_bounds_out_of_range_are_refused_naming_the_bound(name: str) -> None:
    low, high = RANGES[name]
    for bad in (low - 1, high + 1):
        with pytest.raises(BoundsError, match=name) as caught:
            dataclasses.replace(StoreBounds(), **{name: bad}).validate()
        assert caught.value.field == name
    dataclasses.replace(StoreBounds(), **{name: low}).validate()


def test_s5_bounds_must_be_whole_numbers() -> None:
    with pytest.raises(BoundsError, match="whole number"):
        StoreBounds(max_page_size=True).validate()
    with pytest.raises(BoundsError, match="whole number"):
        StoreBounds(max_page_size=1.5).validate()  # type: ignore[arg-type]


def test_s5_bounds_too_large_for_a_grpc_message_are_refused() -> None:
    with pytest.raises(BoundsError, match="2 GiB"):
        StoreBounds(max_payload_bytes=16 * 1024 * 1024, max_enqueue_batch=10_000).validate()


@pytest.mark.parametrize(
    ("method", "requested", "served"),
    [
        ("clamp_claim_batch", 200, 128),
        ("clamp_claim_batch", 128, 128),
        ("clamp_claim_batch", 5, 5),
        ("clamp_claim_batch", -1, 0),
        ("clamp_page_size", 501, 500),
        ("clamp_page_size", 2**31 - 1, 500),
        ("clamp_page_size", 0, 1),
        ("clamp_purge_batch", 5_000, 1_000),
        ("clamp_purge_batch", 1_000, 1_000),
        ("clamp_purge_batch", 10, 10),
        ("clamp_purge_batch", -3, 0),
    ],
)
def test_s5_batch_and_page_sizes_clamp_silently(method: str, requested: int, served: int) -> None:
    assert getattr(StoreBounds(), method)(requested) == served


def test_s5_purge_batches_clamp_to_a_configured_bound() -> None:
    assert StoreBounds(max_purge_batch=7).clamp_purge_batch(1_000) == 7


@pytest.mark.parametrize(
    "bounds",
    [
        StoreBounds(),
        StoreBounds(max_payload_bytes=1_048_576, max_enqueue_batch=100),
        StoreBounds(max_page_size=1),
    ],
)
def test_s5_the_message_limit_fits_a_full_batch_of_max_size_payloads(bounds: StoreBounds) -> None:
    """A valid Enqueue must never hit the transport limit before a bound's clear error."""
    full_batch = bounds.max_enqueue_batch * (
        bounds.max_payload_bytes + 4 * bounds.max_wire_name_length + 1_100
    )
    assert bounds.max_message_bytes() >= full_batch + MESSAGE_HEADROOM_BYTES
    assert bounds.max_message_bytes() >= bounds.max_parents_per_job * bounds.max_output_bytes


def test_s5_an_explicit_message_limit_below_the_bounds_is_refused() -> None:
    assert CoordinatorConfig().message_limit_bytes() == StoreBounds().max_message_bytes()
    assert CoordinatorConfig(max_message_bytes=2**30).message_limit_bytes() == 2**30
    with pytest.raises(ConfigError, match="max_message_bytes"):
        CoordinatorConfig(max_message_bytes=8 * 1024 * 1024).message_limit_bytes()


def test_config_keeps_read_only_views_of_the_moved_bounds() -> None:
    config = CoordinatorConfig(
        bounds=StoreBounds(max_claim_batch=3, max_page_size=4, max_failure_detail_bytes=99)
    )
    assert (config.max_claim_batch, config.max_page_size, config.max_failure_detail_bytes) == (3, 4, 99)


# -- runwick serve: flags, environment, config file --------------------------------------------


def _serve(*argv: str) -> object:
    return build_parser().parse_args(["serve", *argv])


def test_s5_each_bound_has_a_flag_and_an_environment_variable() -> None:
    for name in DOCUMENTED_DEFAULTS:
        options = _serve(flag_of(name), "77")
        assert getattr(bounds_from_options(options, {}), name) == 77, name  # type: ignore[arg-type]
        assert getattr(resolve_bounds({}, {env_of(name): "77"}), name) == 77, name
    assert flag_of("max_payload_bytes") == "--max-payload-bytes"
    assert env_of("max_payload_bytes") == "RUNWICK_MAX_PAYLOAD_BYTES"


def test_s5_no_flags_no_environment_gives_the_defaults() -> None:
    assert bounds_from_options(_serve(), {}) == StoreBounds()  # type: ignore[arg-type]


def test_s5_config_file_then_environment_then_flag(tmp_path: Path) -> None:
    path = tmp_path / "runwick.toml"
    path.write_text("[bounds]\nmax_payload_bytes = 1_000\nmax_page_size = 50\nmax_claim_batch = 8\n")
    environ = {"RUNWICK_MAX_PAGE_SIZE": "60", "RUNWICK_MAX_CLAIM_BATCH": "9"}
    options = _serve("--config", str(path), "--max-claim-batch", "10")

    bounds = bounds_from_options(options, environ)  # type: ignore[arg-type]

    assert (bounds.max_payload_bytes, bounds.max_page_size, bounds.max_claim_batch) == (1_000, 60, 10)
    assert bounds.max_output_bytes == 65_536


def test_s5_runwick_config_names_the_file_too(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[bounds]\nmax_history_per_job = 20\n")
    bounds = bounds_from_options(_serve(), {"RUNWICK_CONFIG": str(path)})  # type: ignore[arg-type]
    assert bounds.max_history_per_job == 20


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[bounds]\nmax_payload_bytes = 'big'\n", "must be an integer"),
        ("[bounds]\nmax_payload_byte = 5\n", "has no setting 'max_payload_byte'"),
        ("[limits]\nmax_payload_bytes = 5\n", r"unknown setting\(s\) limits"),
        ("bounds = 5\n", "must be a table"),
        ("[bounds\n", "not valid TOML"),
        ("[bounds]\nmax_payload_bytes = 0\n", r"max_payload_bytes: must be 1 to .* \(from config file"),
    ],
)
def test_s5_a_wrong_config_file_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        resolve_bounds({}, {}, str(path))


def test_s5_wrong_environment_and_flag_values_name_their_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="RUNWICK_MAX_PAGE_SIZE must be an integer"):
        resolve_bounds({}, {"RUNWICK_MAX_PAGE_SIZE": "lots"})
    with pytest.raises(ConfigError, match=r"\(from RUNWICK_MAX_PAGE_SIZE\)"):
        resolve_bounds({}, {"RUNWICK_MAX_PAGE_SIZE": "0"})
    with pytest.raises(ConfigError, match=r"\(from --max-page-size\)"):
        resolve_bounds({"max_page_size": 0}, {})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_bounds_table(tmp_path / "missing.toml")


def test_s5_serve_refuses_bad_bounds_before_starting(tmp_path: Path) -> None:
    result = subprocess.run(
        runwick_command("serve", "--max-page-size", "0", "--port", "0"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "max_page_size: must be 1 to 10000, got 0 (from --max-page-size)" in result.stderr
    assert not (tmp_path / "runwick.db").exists()


def test_the_message_limit_fits_a_full_batch_whose_jobs_carry_every_field_at_its_bound() -> None:
    """Measured on real messages: each job of a full Enqueue with its names, keys, parents
    and trace context at their bounds, and an assignment whose parents all carry theirs."""
    bounds = StoreBounds()
    trace_context = job_pb2.TraceContext(
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tracestate="k=" + "v" * (MAX_TRACESTATE_BYTES - 2),
    )
    parent_id = "01900000-0000-7000-8000-000000000001"
    job = job_service_pb2.NewJob(
        wire_name="w" * bounds.max_wire_name_length,
        queue="q" * 128,
        payload=b"x" * bounds.max_payload_bytes,
        idempotency_key="k" * 256,
        unique_key="u" * 256,
        parent_ids=[parent_id] * bounds.max_parents_per_job,
        id=parent_id,
        trace_context=trace_context,
    )
    one_job = len(job_service_pb2.EnqueueRequest(jobs=[job]).SerializeToString())
    assert bounds.max_message_bytes() >= bounds.max_enqueue_batch * one_job + MESSAGE_HEADROOM_BYTES
    assignment = worker_service_pb2.Assignment(
        payload=b"x" * bounds.max_payload_bytes, trace_context=trace_context
    )
    for _ in range(bounds.max_parents_per_job):
        assignment.parent_outputs.add(
            job_id=parent_id, output=b"o" * bounds.max_output_bytes, trace_context=trace_context
        )
    assert bounds.max_message_bytes() >= len(assignment.SerializeToString()) + MESSAGE_HEADROOM_BYTES

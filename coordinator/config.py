"""Coordinator configuration: frozen, one docstring per field, units in the names."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.domain.settings import SettingsLayer

DEFAULT_DATABASE_URL = "sqlite:///runwick.db"


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy URL: ``sqlite:///path`` (default, created on first start) or
    ``postgresql://user@host/db`` (migrate first with ``runwick migrate``)."""
    host: str = "127.0.0.1"
    """Address the gRPC server listens on."""
    port: int = 7233
    """gRPC port; 0 picks a free one."""
    job_defaults: SettingsLayer = field(default_factory=SettingsLayer)
    """The ``JobDefaults`` precedence level (R-3): over library defaults, under the SDK's."""
    max_claim_batch: int = 32
    """Most jobs one claim takes for one worker (clamped silently, SPEC §5)."""
    max_page_size: int = 500
    """Most jobs one ListJobs page returns (clamped silently)."""
    default_page_size: int = 100
    """Page size when the request leaves it unset."""
    max_failure_detail_bytes: int = 16_384
    """Full exception text is cut to this many bytes with a marker (SPEC §5)."""
    batch_window_ms: int = 2
    """How long the dispatcher gathers stream messages before one write transaction."""
    maintenance_interval_s: float = 1.0
    """How often lease expiry and due-job promotion run."""
    idle_recheck_interval_s: float = 1.0
    """Idle workers re-check for work this often even without a wake-up: covers jobs
    made available by another replica."""
    maintenance_batch: int = 500
    """Most expired leases or due jobs handled per transaction."""
    drain_timeout_s: float = 30.0
    """On shutdown, how long connected workers get to finish before the server stops."""
    hello_timeout_s: float = 10.0
    """A worker stream that sends no Hello within this time is ended."""
    max_message_bytes: int = 8 * 1024 * 1024
    """gRPC message size limit, both directions."""

"""Coordinator configuration: frozen, one docstring per field, units in the names."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.domain.bounds import StoreBounds
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState

DEFAULT_DATABASE_URL = "sqlite:///runwick.db"
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class IngressLimits:
    """Caps on what clients may open on the gRPC ports at once (docs/security.md), so
    no client, signed in or not, holds more than its share of the process."""

    max_connections: int = 10_000
    """Connections each gRPC port holds open at once (grpcio's
    ``grpc.max_allowed_incoming_connections``); one more is closed as it is accepted, and
    a place frees as soon as a connection closes. Sized like ``max_concurrent_rpcs``: a
    worker holds one connection."""
    max_streams_per_connection: int = 256
    """Calls one connection may have open at once (HTTP/2 ``MAX_CONCURRENT_STREAMS``); a
    client's further calls wait on its side until one ends."""
    max_concurrent_rpcs: int = 10_000
    """Calls the API port serves at once, over all connections (worker streams and
    WaitJob calls included); one past it gets RESOURCE_EXHAUSTED at once."""
    max_health_watches: int = 1_000
    """Health ``Watch`` streams each port serves at once; one past it gets
    RESOURCE_EXHAUSTED (``Check`` is not limited)."""

    def check(self) -> IngressLimits:
        """Returns self, or raises ConfigError naming the first limit below 1."""
        for name in (
            "max_connections",
            "max_streams_per_connection",
            "max_concurrent_rpcs",
            "max_health_watches",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number of at least 1, got {value!r}")
        return self


@dataclass(frozen=True, slots=True)
class ScalerLimits:
    """What one caller of the scaler port (KEDA's external scaler, docs/autoscaling.md)
    may ask for: each bound is checked before the request is read from the database."""

    max_streams: int = 100
    """``StreamIsActive`` streams open at once (one per ScaledObject trigger); one past it
    gets RESOURCE_EXHAUSTED."""
    max_concurrent_reads: int = 16
    """``IsActive`` and ``GetMetrics`` calls reading the database at once; one more gets
    RESOURCE_EXHAUSTED, so callers without a token never take more than this share of the
    threads that serve the API's reads."""
    max_counted_jobs: int = 100_000
    """Leased and due jobs are each counted up to this, so a count reads a bounded part
    of the indexes whatever the backlog; far above any replica count it scales to."""
    max_horizon_s: int = 7 * 86_400
    """Largest ``horizonSeconds`` a trigger may ask for."""
    max_wire_names: int = 64
    """Most names in a trigger's ``wireNames``."""
    max_slots_per_replica: int = 100_000
    """Largest ``slotsPerReplica`` a trigger may ask for."""
    stream_recheck_interval_s: float = 1.0
    """How often an open stream reads again when no enqueue woke it (jobs that become due,
    enqueues another replica made while its notification was lost); well inside the 2 s
    KEDA is promised."""
    stream_min_recheck_s: float = 0.2
    """Least time between two reads of one stream: enqueues to other queues wake it too."""
    max_request_bytes: int = 16_384
    """Largest request the port reads; a trigger's metadata is a few hundred bytes."""


@dataclass(frozen=True, slots=True)
class DashboardLimits:
    """What one client may ask of the dashboard's port (docs/security.md, "The
    dashboard"): each bound is checked before any work is done for the request."""

    max_form_bytes: int = 8_192
    """Largest POST body; a larger one is refused (413) before it is read. The dashboard's
    forms are a few hundred bytes (a bulk retry of a page of 50 jobs is about 2 KiB)."""
    body_timeout_s: float = 10.0
    """How long a POST body may take to arrive once its headers have (408 after)."""
    idle_timeout_s: int = 5
    """A connection that has not sent a complete request head this long after it opened
    or after its last response is closed: idle keep-alive connections and headers
    trickled in a byte at a time alike."""
    max_connections: int = 64
    """Open connections at once; more are closed as soon as they are accepted (and
    requests beyond it on open ones answered 503), so the dashboard cannot use up the
    process's file descriptors the gRPC API needs."""
    max_header_bytes: int = 16_384
    """Largest request head (request line and headers); more ends the connection (431)."""
    backlog: int = 128
    """Connections the kernel queues before the server accepts them."""
    signin_burst: int = 20
    """Sign-in attempts a client address may make at once (429 after): enough for a few
    operators behind one address, or a browser test's many sign-ins."""
    signin_refill_per_s: float = 0.5
    """How fast an address earns attempts back: one every 2 s."""
    signin_clients_tracked: int = 10_000
    """Client addresses the sign-in limiter remembers; the least recently seen is
    forgotten first, so the table stays bounded whatever the number of addresses."""
    signin_log_interval_s: float = 60.0
    """At most one log line about refused sign-ins per client address this often, with
    the count of those it stood for."""
    max_sessions_per_token: int = 32
    """Sessions one token may hold at once; a new sign-in ends its oldest beyond this."""
    search_window_jobs: int = 10_000
    """Jobs a page of the jobs search reads at most to apply what no index answers (a
    unique key, a finished-time range, a sort by run or finish time): see
    ``domain.search``."""
    search_text_window_jobs: int = 1_000
    """The same bound for a search by payload text, which reads payloads."""
    search_text_head_bytes: int = 4_096
    """How much of each payload a text search looks in (what the job page shows)."""
    bulk_count_cap: int = 10_000
    """Jobs of a wire name a bulk action's confirmation reads at most to count its
    matches (other filters are counted from the maintained queue counts)."""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy URL: ``sqlite:///path`` (default, created on first start) or
    ``postgresql://user@host/db`` (migrate first with ``runwick migrate``)."""
    host: str = "127.0.0.1"
    """Address the gRPC server listens on."""
    port: int = 7233
    """gRPC port; 0 picks a free one."""
    share_port: bool = False
    """Let other processes of the same user listen on ``port`` too (``SO_REUSEPORT``; the
    kernel spreads new connections over them): set on every process of ``runwick serve
    --processes N``. Off, a second server on the port fails to start instead."""
    job_defaults: SettingsLayer = field(default_factory=SettingsLayer)
    """The ``JobDefaults`` precedence level (R-3): over library defaults, under the SDK's."""
    bounds: StoreBounds = field(default_factory=StoreBounds)
    """The limits of docs/limits.md (payload, names, parents, output, failure text, batch and
    page sizes, history); the store applies them (``Store.open(..., bounds=...)``)."""
    pg_idle_in_transaction_timeout_ms: int = 10_000
    """PostgreSQL ``idle_in_transaction_session_timeout`` of every connection the store
    opens: a replica frozen inside a transaction (SIGSTOP, a paused VM) loses its session
    after this long, so the rows it locked, which lease expiry skips, are freed. Well
    below the default 60 s lease; 0 turns it off."""
    pg_lock_timeout_ms: int = 5_000
    """PostgreSQL ``lock_timeout``: a statement waiting this long for a row lock fails
    (UNAVAILABLE, try again) instead of hanging; 0 turns it off."""
    pg_statement_timeout_ms: int = 30_000
    """PostgreSQL ``statement_timeout``: a statement running this long is cancelled
    (UNAVAILABLE); 0 turns it off."""
    sqlite_busy_timeout_ms: int = 30_000
    """SQLite ``busy_timeout``: how long a transaction waits for the database's write lock
    (held only by another process on the file) before it fails (UNAVAILABLE). SQLite needs
    no other timeout: one coordinator process is its only writer."""
    default_page_size: int = 100
    """Page size when the request leaves it unset (clamped to ``bounds.max_page_size``)."""
    max_pending_enqueue_jobs: int = 10_000
    """Most jobs of enqueue calls waiting, all together, for the next write (a
    single-job cancel waiting counts as one): past it a new call waits until that batch
    is taken (its deadline still holds). A single call
    is always taken, whatever its size; the next batch writes them all in one
    transaction, so this also bounds that transaction's enqueues."""
    batch_window_ms: int = 0
    """How long the dispatcher waits, once woken, to gather more stream messages before
    one write transaction. 0 (the default): none. Under load the batches form by
    themselves from what arrives while the previous one is written; when idle, a message
    is written at once instead of after a fixed wait."""
    join_start_wait_ms: float = 2.0
    """How long an enqueue's batch, having handed its claims out before its commit, waits
    for their starts to write them in the same transaction (``dispatch.joined_starts``):
    at a light load a job then needs one transaction before its handler runs, not two.
    0: no early hand-out (claims go out after the commit, starts in the next batch)."""
    maintenance_interval_s: float = 1.0
    """How often lease expiry and due-job promotion run (``scheduler.leases``,
    ``scheduler.due``)."""
    schedule_interval_s: float = 1.0
    """How often the schedule loop enqueues the ticks that have come (R-18,
    ``scheduler.cron``); a tick's job is enqueued at most this late."""
    schedule_grace_s: float = 60.0
    """How late a schedule's tick may still be enqueued. Ticks older than this when a
    pass finds them were missed while no coordinator ran: recorded as skipped, or with
    the ``run_once`` catch-up policy folded into one job."""
    clock_refresh_interval_s: float = 60.0
    """How often a PostgreSQL replica re-reads the database clock it anchors its own to
    (R-13, ``scheduler.clock``)."""
    idle_recheck_interval_s: float = 1.0
    """Idle workers re-check for work this often even without a wake-up, while nothing
    tells this replica of jobs another one made claimable (PostgreSQL with its LISTEN
    connection down). Otherwise they re-check every ``idle_interval_s``."""
    idle_interval_s: float = 30.0
    """How long an idle coordinator leaves the database alone: lease expiry, due-job
    promotion and count folding sleep this long (never less than their own interval)
    after a pass that found nothing to watch, until this replica claims, schedules or
    writes again; idle workers re-check for work this often when every wake-up reaches
    them (SQLite, or PostgreSQL with LISTEN connected). A replica that crashed leaves
    jobs whose leases the others recover within this time at worst, when they were idle."""
    maintenance_batch: int = 500
    """Most expired leases or due jobs handled per transaction."""
    # -- retention (R-19, ``scheduler.retention``): age since ``finished_at_ms``; None keeps
    # jobs in that state forever.
    retain_succeeded_ms: int | None = 7 * DAY_MS
    """How long succeeded jobs are kept (default 7 days) before retention purges them."""
    retain_failed_ms: int | None = 30 * DAY_MS
    """How long failed jobs are kept (default 30 days)."""
    retain_cancelled_ms: int | None = 30 * DAY_MS
    """How long cancelled jobs are kept (default 30 days)."""
    retention_interval_s: float = 60.0
    """How often retention looks for jobs past their age (each pass purges in batches of
    ``bounds.max_purge_batch``, one transaction each, until none is left)."""
    drain_timeout_s: float = 30.0
    startup_database_wait_s: float = 30.0
    """While the coordinator starts, how long a database connection that was made and then
    lost (a terminated backend, a server starting up, shutting down or recovering) is tried
    again before the start gives up; 0 tries once. A refused connection is tried again
    for as long while the schema is checked."""
    """On shutdown, how long connected workers get to finish before the server stops."""
    hello_timeout_s: float = 10.0
    """A worker stream that sends no Hello within this time is ended."""
    max_message_bytes: int | None = None
    """gRPC message size limit, both directions; None derives it from ``bounds``
    (``StoreBounds.max_message_bytes()``). A value below that is refused: a valid
    request must never hit the transport limit before the bound's clear error."""
    auth_enabled: bool = False
    """Require a bearer token with the right scope on every RPC (R-20, R-21). ``runwick
    serve`` turns it on unless ``--insecure``; off is refused unless ``host`` is a
    loopback address (``check_security``)."""
    admin_token_file: str | None = None
    """Where to write the bootstrap admin token (mode 0600) when the coordinator creates
    it on first start, e.g. a volume a Kubernetes job turns into a Secret."""
    bootstrap_token: str | None = field(default=None, repr=False)
    """An admin token the operator chose (``rwk_<16 hex>_<43 characters>``, e.g. from a
    Kubernetes Secret): on a start with no token at all it becomes the first admin token,
    stored hashed like any other; once tokens exist it is not used. None: the coordinator
    makes one (``generate_bootstrap_token``)."""
    generate_bootstrap_token: bool = True
    """With no token at all and no ``bootstrap_token``, create a random admin token (the
    caller shows or stores it). ``runwick serve`` turns it off when it could do neither
    (stdout is no terminal and no ``admin_token_file``): the next start makes it."""
    auth_cache_ttl_s: float = 5.0
    """How long a token check is reused: bounds how late another replica notices a
    revocation (this replica notices at once)."""
    tls_cert_file: str | None = None
    """PEM server certificate (chain); with ``tls_key_file`` the port speaks TLS only."""
    tls_key_file: str | None = None
    """PEM private key of ``tls_cert_file``."""
    tls_client_ca_file: str | None = None
    """PEM CA bundle: when set, clients must present a certificate it signed (mutual TLS)."""
    tls_reload_interval_s: float = 10.0
    """How often the HTTPS servers (dashboard, ``/metrics``) look for renewed TLS files;
    the API port looks on every new TLS handshake."""
    health_port: int | None = None
    """Plaintext port serving only gRPC health (``liveness``, ``readiness``), for
    Kubernetes' native gRPC probes even when the API port uses TLS; 0 picks a free one,
    None serves none (``runwick serve`` defaults to 7234)."""
    scaler_port: int | None = None
    """Port serving only KEDA's external scaler (``externalscaler.ExternalScaler``) to
    callers without a token, with the API port's TLS (docs/autoscaling.md); 0 picks a free
    one, None serves none (``runwick serve`` defaults to none)."""
    scaler: ScalerLimits = field(default_factory=ScalerLimits)
    """Bounds on what a scaler caller may ask (docs/autoscaling.md)."""
    metrics_port: int | None = None
    """HTTP port of the Prometheus ``/metrics`` endpoint; 0 picks a free one, None serves
    none (``runwick serve`` defaults to 9233)."""
    metrics_max_label_values: int = 100
    """Distinct values each caller-chosen metric label (``queue``, ``wire_name``) takes
    before the rest are counted under ``(other)``."""
    metrics_max_series: int = 500
    """Most series (label combinations) any one metric has, whatever callers send: a
    queue and wire-name pair past a metric's room is counted under ``(other)`` in both
    labels. At least 18 (the run-duration histogram splits each pair by 9 outcomes)."""
    metrics_tls: bool = False
    """Serve ``/metrics`` over HTTPS with ``tls_cert_file`` and ``tls_key_file``; with
    ``tls_client_ca_file`` the scraper must also present a client certificate it signed."""
    metrics_token: str | None = field(default=None, repr=False)
    """A bearer token every scrape must send (``Authorization: Bearer ...``); None: none."""
    metrics_max_connections: int = 32
    """Connections ``/metrics`` holds open at once; more are closed at once."""
    metrics_max_header_bytes: int = 8192
    """Largest request head (request line and headers) ``/metrics`` reads."""
    metrics_idle_timeout_s: float = 10.0
    """A ``/metrics`` connection that sends no complete request for this long (or
    reads no response) is closed."""
    dashboard_port: int | None = None
    """HTTP port of the web dashboard (on ``host``; HTTPS with the API's certificate when
    TLS is configured); 0 picks a free one, None serves none (``runwick serve`` defaults
    to 7235)."""
    dashboard_session_ttl_s: float = 12 * 3600.0
    """How long a dashboard sign-in lasts. Sessions are kept in the database, so a
    sign-out or the token's revocation ends them at once on every replica."""
    dashboard_allowed_hosts: tuple[str, ...] = ()
    """Host names the dashboard answers besides ``host`` itself (and, when ``host`` is a
    loopback address, ``localhost``, ``127.0.0.1`` and ``::1``): the names operators reach
    it by, e.g. an Ingress's. A request naming another ``Host`` is refused (421), which
    stops DNS rebinding. On a wildcard bind (``0.0.0.0``, ``::``) with none listed, any
    ``Host`` is answered (authentication is on there: ``--insecure`` is loopback-only)."""
    dashboard_limits: DashboardLimits = field(default_factory=DashboardLimits)
    """Bounds on the dashboard's connections, requests and sign-ins."""
    health_check_interval_s: float = 5.0
    """How often a background task reads the database: readiness and the queue gauges."""
    queue_count_fold_interval_s: float = 1.0
    """How often the job-count deltas each write appends are folded into the maintained
    counts per queue and state (R-17, ``scheduler.counts``)."""
    health_check_timeout_s: float = 5.0
    """A database check slower than this makes the coordinator not ready."""
    held_back_walked_jobs: int = 10_000
    """Due jobs the background read walks per queue with a per-key limit or rate, for the
    held-back gauge and the desired slots (one grouped statement, ``store.backlog``):
    beyond them a backlog is neither weighed nor counted runnable. A walk of 100,000
    took 0.5 s on PostgreSQL and 1.3 s on SQLite on a loaded machine (benchmarks/LOG.md,
    2026-12-06), too much of the check's ``health_check_timeout_s`` every 5 s."""
    drain_reserve_s: float = 2.0
    """Workers are told to drain this much sooner than ``drain_timeout_s`` (at most half
    of it), so results of runs they interrupt are still written before the server stops."""
    keepalive_time_ms: int = 30_000
    """HTTP/2 keepalive ping interval on idle connections."""
    keepalive_timeout_ms: int = 10_000
    """A keepalive ping unanswered this long closes the connection."""
    max_connection_age_ms: int = 30 * 60_000
    """Connections are closed (GOAWAY) after this age, so long-lived worker streams
    reconnect and spread over replicas (docs/scaling.md); workers reconnect with backoff."""
    max_connection_age_grace_ms: int = 60_000
    """After ``max_connection_age_ms``, how long open calls may go on before they are cut;
    above the longest unary call (a WaitJob chunk: 30 s). Worker streams end cleanly
    before that (``WorkerServicer`` retires them at about the connection age)."""
    ingress: IngressLimits = field(default_factory=IngressLimits)
    """Caps on connections, calls and health watches (docs/security.md)."""

    # Read-only views of bounds that used to be fields here.
    @property
    def max_claim_batch(self) -> int:
        return self.bounds.max_claim_batch

    @property
    def max_page_size(self) -> int:
        return self.bounds.max_page_size

    @property
    def max_failure_detail_bytes(self) -> int:
        return self.bounds.max_failure_detail_bytes

    def retention_ages_ms(self) -> dict[JobState, int]:
        """The age after which retention purges each terminal state it purges at all;
        raises ConfigError for an age or interval that is not positive."""
        ages = {
            JobState.SUCCEEDED: self.retain_succeeded_ms,
            JobState.FAILED: self.retain_failed_ms,
            JobState.CANCELLED: self.retain_cancelled_ms,
        }
        for state, age in ages.items():
            if age is not None and (isinstance(age, bool) or not isinstance(age, int) or age <= 0):
                raise ConfigError(
                    f"retain_{state.value}_ms must be a positive whole number of milliseconds, "
                    f"got {age!r}; None keeps {state.value} jobs forever"
                )
        if not self.retention_interval_s > 0:
            raise ConfigError(f"retention_interval_s must be positive, got {self.retention_interval_s!r}")
        return {state: age for state, age in ages.items() if age is not None}

    def message_limit_bytes(self) -> int:
        """The gRPC message size limit to serve with; raises ConfigError when an explicit
        ``max_message_bytes`` is smaller than the bounds need."""
        needed = self.bounds.max_message_bytes()
        if self.max_message_bytes is None:
            return needed
        if self.max_message_bytes < needed:
            raise ConfigError(
                f"max_message_bytes {self.max_message_bytes} is below the {needed} bytes the bounds "
                "need (max_enqueue_batch jobs of max_payload_bytes); raise it or leave it unset"
            )
        return self.max_message_bytes


class ConfigError(ValueError):
    """The configuration is inconsistent or unsafe; the message says what to change."""


FILE_SUFFIX = "_FILE"


def env_or_file(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """A setting from the environment variable ``name`` or from the file that
    ``name_FILE`` names (a mounted Kubernetes Secret, say): ``(value, where)``, or None
    when neither is set. The file's trailing whitespace (its final newline) is dropped.

    Raises ConfigError when both are set, the file cannot be read or holds nothing.
    """
    value, path = environ.get(name) or None, environ.get(name + FILE_SUFFIX) or None
    if value is not None and path is not None:
        raise ConfigError(f"set {name} or {name}{FILE_SUFFIX}, not both")
    if value is not None:
        return value, name
    if path is None:
        return None
    return read_setting_file(path, f"{name}{FILE_SUFFIX}"), f"{name}{FILE_SUFFIX} ({path})"


def read_setting_file(path: str, what: str) -> str:
    """The text of a file holding one setting, trailing whitespace dropped; raises
    ConfigError naming ``what`` when it cannot be read or is empty."""
    try:
        text = Path(path).read_text(encoding="utf-8").rstrip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"{what}: cannot read {path}: {reason}") from exc
    if not text:
        raise ConfigError(f"{what}: {path} is empty")
    return text


LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_security(config: CoordinatorConfig) -> None:
    """Refuses auth off on a non-loopback address (R-20) and half-configured TLS."""
    if not config.auth_enabled and not is_loopback(config.host):
        raise ConfigError(
            f"--insecure (authentication off) is refused on {config.host}: it is allowed only "
            "on a loopback address such as 127.0.0.1"
        )
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise ConfigError("TLS needs both --tls-cert and --tls-key")
    if config.tls_client_ca_file and not config.tls_cert_file:
        raise ConfigError("--tls-client-ca (client certificates) needs TLS: give --tls-cert and --tls-key")
    if not config.tls_reload_interval_s > 0:  # also refuses NaN; 0 would spin
        raise ConfigError(f"tls_reload_interval_s must be above 0, got {config.tls_reload_interval_s!r}")
    config.ingress.check()
    check_metrics(config)


METRICS_MIN_SERIES = 18
"""The run-duration histogram splits each queue and wire-name pair by 9 outcomes: a cap
below twice that would leave it no room for a pair of its own."""
METRICS_MIN_TOKEN_CHARS = 16
METRICS_MIN_HEADER_BYTES = 1024


def check_metrics(config: CoordinatorConfig) -> None:
    """Refuses metric caps and ``/metrics`` settings that leave nothing bounded or
    served, TLS without a certificate and a token that is too short to guess at."""
    if config.metrics_max_label_values < 1:
        raise ConfigError(
            f"metrics_max_label_values must be at least 1, got {config.metrics_max_label_values}"
        )
    if config.metrics_max_series < METRICS_MIN_SERIES:
        raise ConfigError(
            f"--metrics-max-series must be at least {METRICS_MIN_SERIES}, got {config.metrics_max_series}"
        )
    if config.metrics_tls and not config.tls_cert_file:
        raise ConfigError(
            "--metrics-tls serves /metrics with the API's certificate: give --tls-cert and --tls-key"
        )
    token = config.metrics_token
    if token is not None and (
        len(token) < METRICS_MIN_TOKEN_CHARS or not all("!" <= char <= "~" for char in token)
    ):
        raise ConfigError(
            f"the metrics token must be at least {METRICS_MIN_TOKEN_CHARS} printable ASCII "
            "characters without spaces (it is sent in an HTTP header)"
        )
    if config.metrics_max_connections < 1:
        raise ConfigError(f"metrics_max_connections must be at least 1, got {config.metrics_max_connections}")
    if config.metrics_max_header_bytes < METRICS_MIN_HEADER_BYTES:
        raise ConfigError(
            f"metrics_max_header_bytes must be at least {METRICS_MIN_HEADER_BYTES} (a scrape's own "
            f"headers need that), got {config.metrics_max_header_bytes}"
        )
    if not config.metrics_idle_timeout_s > 0:
        raise ConfigError(f"metrics_idle_timeout_s must be positive, got {config.metrics_idle_timeout_s!r}")

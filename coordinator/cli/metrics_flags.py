"""``runwick serve``'s flags for ``/metrics`` beyond its port: the per-metric series cap,
TLS and the scrape token. (``--metrics-port`` and ``--metrics-max-label-values`` sit
with the other ports in ``cli.serve``.)"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

METRICS_TOKEN_ENV = "RUNWICK_METRICS_TOKEN"


def add_metrics_flags(serve: argparse.ArgumentParser) -> None:
    env = os.environ.get
    serve.add_argument(
        "--metrics-max-series",
        type=int,
        default=int(env("RUNWICK_METRICS_MAX_SERIES", "500")),
        help="most series (label combinations) of any one metric; queue and wire-name pairs "
        "past it count as (other) [RUNWICK_METRICS_MAX_SERIES]",
    )
    serve.add_argument(
        "--metrics-tls",
        action="store_true",
        default=env("RUNWICK_METRICS_TLS", "") not in ("", "0", "false"),
        help="serve /metrics over HTTPS with --tls-cert and --tls-key; with --tls-client-ca "
        "scrapers need a client certificate too [RUNWICK_METRICS_TLS=1]",
    )
    serve.add_argument(
        "--metrics-token-file",
        default=None,
        metavar="PATH",
        help="a file holding the bearer token every scrape of /metrics must send "
        f"[{METRICS_TOKEN_ENV}, or {METRICS_TOKEN_ENV}_FILE]",
    )


def metrics_config(options: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The CoordinatorConfig fields these flags set. Raises ConfigError for an unreadable
    token file or both token variables set."""
    from coordinator.config import env_or_file, read_setting_file

    token: str | None = None
    if options.metrics_token_file:
        token = read_setting_file(options.metrics_token_file, "--metrics-token-file")
    else:
        found = env_or_file(os.environ if environ is None else environ, METRICS_TOKEN_ENV)
        token = found[0] if found else None
    return {
        "metrics_max_series": options.metrics_max_series,
        "metrics_tls": options.metrics_tls,
        "metrics_token": token,
    }

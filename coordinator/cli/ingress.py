"""``runwick serve``'s caps on what clients may hold open on the gRPC ports
(``IngressLimits``, docs/security.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

INGRESS_CAPS = (
    # (flag and IngressLimits field, default, what it caps)
    ("max_connections", "10000", "connections each gRPC port holds open at once; more are closed"),
    ("max_streams_per_connection", "256", "calls one connection may have open at once"),
    (
        "max_concurrent_rpcs",
        "10000",
        "calls served at once over all connections; more get RESOURCE_EXHAUSTED",
    ),
    ("max_health_watches", "1000", "health Watch streams open at once on each port"),
)
"""Caps on what clients may hold open on the gRPC ports (docs/security.md)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_ingress_flags(serve: argparse.ArgumentParser) -> None:
    """One flag per cap, each with its ``RUNWICK_*`` variable."""
    for field_name, default, what in INGRESS_CAPS:
        env = f"RUNWICK_{field_name.upper()}"
        serve.add_argument(
            "--" + field_name.replace("_", "-"),
            dest=field_name,
            type=_positive,
            default=os.environ.get(env, default),  # a string default goes through ``type`` too
            metavar="N",
            help=f"{what} (default {default}) [{env}]",
        )


def ingress_config(options: argparse.Namespace) -> dict[str, Any]:
    """The CoordinatorConfig field the ingress flags set."""
    from coordinator.config import IngressLimits

    return {"ingress": IngressLimits(**{name: getattr(options, name) for name, _, _ in INGRESS_CAPS})}

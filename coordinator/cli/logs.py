"""``--log-level`` and ``--log-format``: the logging flags of ``serve`` and ``worker``."""

from __future__ import annotations

import argparse
import logging
import os


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the flags ``worker_sdk.configure_logging`` takes."""
    env = os.environ.get
    parser.add_argument(
        "--log-level",
        default=env("RUNWICK_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO (default), WARNING or ERROR [RUNWICK_LOG_LEVEL]",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=env("RUNWICK_LOG_FORMAT", "text"),
        help="json: one object per line with job and attempt IDs [RUNWICK_LOG_FORMAT]",
    )


QUIET_LOGGERS = ("alembic",)
"""Libraries whose INFO lines (plugin set-up, one line per migration step) say nothing an
operator acts on: the store logs one line per schema change instead."""


def quiet_libraries() -> None:
    """Keeps those libraries' lines to WARNING and above, unless DEBUG is asked for."""
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

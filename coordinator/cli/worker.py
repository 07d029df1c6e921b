"""``runwick worker pkg.mod:worker``: runs a ``worker_sdk.Worker`` defined in a module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from coordinator.cli.heap import freeze_start_up_heap
from coordinator.cli.logs import add_logging_flags
from worker_sdk import configure_logging


def add_worker_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser(
        "worker", help="run a Worker defined in a module: runwick worker pkg.mod:worker"
    )
    worker.add_argument(
        "spec", help="module path and attribute of a worker_sdk.Worker, e.g. myapp.jobs:worker"
    )
    add_logging_flags(worker)


def run_worker(options: argparse.Namespace) -> int:
    """Imports the worker (the current directory on the path) and runs it until a signal."""
    configure_logging(options.log_level, options.log_format)
    module_name, _, attribute = options.spec.partition(":")
    if not module_name or not attribute:
        print("runwick: worker spec must look like package.module:attribute", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    try:
        worker = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        print(f"runwick: cannot load {options.spec}: {exc}", file=sys.stderr)
        return 2
    freeze_start_up_heap()  # the modules it imported, the user's among them, live as long as it
    worker.run()
    return 0

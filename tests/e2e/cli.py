"""Runs the ``runwick`` command as a subprocess, as a user would."""

from __future__ import annotations

import asyncio
import os
import subprocess

from tests.support import ROOT, runwick_command


async def runwick(
    *args: str, token: str | None = None, stdin: str = "", check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs the CLI without blocking an in-process coordinator's loop.

    The caller's ``RUNWICK_*`` variables (and ``COLUMNS``) are left out so each test says what it means;
    ``token`` goes in as ``RUNWICK_TOKEN`` (the env form of ``--token``).
    """
    # COLUMNS too: pytest-xdist's workers set it to 80, and a table piped with COLUMNS set
    # is cut to it; without it the CLI's output is what a script reading the pipe gets.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_") and k != "COLUMNS"}
    if token is not None:
        env["RUNWICK_TOKEN"] = token
    result = await asyncio.to_thread(
        subprocess.run,
        runwick_command(*args),
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result

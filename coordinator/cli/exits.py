"""The exit statuses of every ``runwick`` command (the table in docs/cli.md), and the
one confirmation prompt of the commands that destroy or change many jobs.

====  ==============================================================================
0     done (a prompt answered "no" or nothing to do is done too: nothing failed)
1     the coordinator refused (not found, not allowed, a precondition) or failed, or
      none answered at ``--target``; a prompt answered "no"
2     bad usage or input, whether the command or the coordinator found it (a flag, an
      ID or a name that does not parse, a value out of range, a database URL), and a
      destructive command without ``--yes`` where no terminal can ask
3     ``serve``: the database was reachable, but its connection kept failing for the
      whole ``--startup-database-wait`` (not the URL's fault: start it again later)
130   interrupted (Ctrl-C)
141   the reader of the output went away (``| head``)
====  ==============================================================================
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2
EXIT_DATABASE_UNSTABLE = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13


def confirmed(question: str, *, refusal_without_terminal: str) -> int | None:
    """Asks ``question``: None when the answer is yes, else the exit status to return:
    ``EXIT_REFUSED`` for any other answer, ``EXIT_BAD_INPUT`` when no answer can come
    (stdin is not a terminal and holds none), printing ``refusal_without_terminal``: a
    script must say ``--yes``."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        print(file=sys.stderr)
        if not sys.stdin.isatty():
            print(
                f"runwick: {refusal_without_terminal}: pass --yes, or run it on a terminal to be asked",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return None
    print("runwick: nothing done", file=sys.stderr)
    return EXIT_REFUSED

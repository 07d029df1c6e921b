"""``runwick completion bash|zsh|fish``: the shell code that completes ``runwick``'s
commands, flags and choices, made by argcomplete (``argcomplete.autocomplete`` in
``main`` answers the shell's requests from the same parser).

Install it once, e.g. ``runwick completion bash > ~/.local/share/bash-completion/completions/runwick``,
``runwick completion zsh > "${fpath[1]}/_runwick"`` or
``runwick completion fish > ~/.config/fish/completions/runwick.fish``.
"""

from __future__ import annotations

import argparse

from argcomplete.shell_integration import shellcode

SHELLS = ("bash", "zsh", "fish")


def add_completion_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = commands.add_parser(
        "completion",
        help="print shell completion code for bash, zsh or fish",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def run_completion(options: argparse.Namespace) -> int:
    print(shellcode(["runwick"], shell=options.shell), end="")
    return 0

"""The Python blocks of README.md and docs/*.md, read for the snippet runner
(tests/integration/test_doc_snippets.py).

A block is run unless the line just before its fence is a skip marker with a reason,
``<!-- snippet: skip (needs TLS certificate files) -->``; a marker without a reason is
an error, so every skipped block says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import ROOT

FENCE = re.compile(r"^```python[ \t]*$")
SKIP = re.compile(r"^<!--\s*snippet:\s*skip\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")

DEFAULT_TARGET = "127.0.0.1:7233"
"""The address the pages use for a local coordinator; the runner points it at its own."""


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    """Line of the opening fence, 1-based."""
    code: str
    skip_reason: str | None


class SnippetMarkerError(ValueError):
    """A skip marker without a reason, or a block left unclosed."""


def documentation_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def snippets_of(path: Path, root: Path = ROOT) -> list[Snippet]:
    """Every ```python block of one page, in order."""
    name = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    index = 0
    while index < len(lines):
        if not FENCE.match(lines[index]):
            index += 1
            continue
        opening = index
        end = next((i for i in range(opening + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise SnippetMarkerError(f"{name}:{opening + 1}: a python block is never closed")
        found.append(
            Snippet(
                name,
                opening + 1,
                "\n".join(lines[opening + 1 : end]) + "\n",
                _skip_reason(lines, opening, name),
            )
        )
        index = end + 1
    return found


def _skip_reason(lines: list[str], opening: int, page: str) -> str | None:
    previous = next((lines[i] for i in range(opening - 1, -1, -1) if lines[i].strip()), "")
    marker = SKIP.match(previous.strip())
    if marker is None:
        return None
    reason = (marker.group("reason") or "").strip()
    if not reason:
        raise SnippetMarkerError(
            f"{page}:{opening + 1}: say why the block is skipped: <!-- snippet: skip (why) -->"
        )
    return reason

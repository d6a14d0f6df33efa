"""The steps the README's Quickstart and docs/from-code.md give a newcomer, read from the
pages themselves (issue 39): a fenced block preceded by ``<!-- docs-test: ACTION [PATH] -->``
is a step, and a test runs it as written, so that what the pages say cannot drift from what
runs.

Actions: ``write PATH`` (the block is the whole file), ``append PATH`` (added at the end of
the file), ``run`` (each line a command that must succeed), ``start`` (each line a process
that keeps running: a worker, beat), ``shell`` (Python for ``python manage.py shell``), and
``restart`` (no block: stop the started processes and start them again). Paths are relative
to the project's root, where ``manage.py`` is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the pages a newcomer follows, in the order they follow them
PAGES = ("README.md", "docs/from-code.md")
ACTIONS_WITH_FILE = ("write", "append")
ACTIONS = (*ACTIONS_WITH_FILE, "run", "start", "shell", "restart")

MARKER = re.compile(r"^<!-- docs-test: (?P<action>\w+)(?: (?P<path>\S+))? -->\n", re.MULTILINE)
FENCE = re.compile(r"```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
ANY_FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Step:
    page: str
    line: int
    action: str
    path: str
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[str]:
        """A ``run`` or ``start`` block's commands: its lines, comments and blanks left out."""
        lines = (line.split(" #", 1)[0].strip() for line in self.code.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def steps(page: str, text: str | None = None) -> list[Step]:
    """The marked steps of ``page`` (relative to the repository; ``text``: its text, when
    given), in the page's order. A marker that is not an action, or not followed by its
    block, is an error naming it."""
    if text is None:
        text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for marker in MARKER.finditer(text):
        line = text.count("\n", 0, marker.start()) + 1
        action, path = marker["action"], marker["path"] or ""
        assert action in ACTIONS, f"{page}:{line}: unknown docs-test action {action!r}"
        assert bool(path) == (action in ACTIONS_WITH_FILE), (
            f"{page}:{line}: docs-test {action!r} " + ("needs a path" if not path else "takes none")
        )
        if action == "restart":
            found.append(Step(page, line, action, path, "", ""))
            continue
        block = FENCE.match(text, marker.end())
        assert block is not None, f"{page}:{line}: docs-test {action!r} is not followed by a block"
        found.append(Step(page, line, action, path, block["lang"], block["code"]))
    return found


def python_blocks(page: str) -> list[tuple[int, str]]:
    """Every fenced ``python`` block of ``page``, marked or not: (line, code)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m["code"])
        for m in ANY_FENCE.finditer(text)
        if m["lang"] == "python"
    ]

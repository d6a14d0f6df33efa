"""The behaviour contract, docs/CONTRACT.md, defines every rule the repository cites.

Code, tests and docs cite rules as ``R<n>`` and sections as ``§<n>``. The contract defines a
rule on a line of its own that starts with ``- **R<n>**`` and a section with a heading
``## §<n> ...``. These tests fail when something cites a rule or section the contract does
not define, when the contract loses or repeats one of R1..R24 or §1..§7, and when a text
file points outside the repository for it (the contract used to live one level up).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "CONTRACT.md"
RULES = range(1, 37)  # R1..R36
SECTIONS = range(1, 15)  # §1..§14

RULE_DEFINITION = re.compile(r"^- \*\*R(\d+)\*\* ", re.MULTILINE)
SECTION_DEFINITION = re.compile(r"^## §(\d+) ", re.MULTILINE)
RULE_CITATION = re.compile(r"\bR(\d+)\b")
SECTION_CITATION = re.compile(r"§ ?(\d+)")
#: where rules are cited: the package, the tests, the demo project, the benchmarks, the
#: README and the contract itself
CITING = (
    "durablebeat/**/*.py",
    "tests/**/*.py",
    "project/**/*.py",
    "benchmarks/**/*.py",
    "benchmarks/**/*.md",
    "README.md",
    "docs/**/*.md",
)
#: a path out of the repository, spelled in two parts so that this file does not match it
OUTSIDE = "../" + "shared/"


def contract() -> str:
    assert CONTRACT.is_file(), "docs/CONTRACT.md is missing"
    return CONTRACT.read_text(encoding="utf-8")


def defined(pattern: re.Pattern[str]) -> list[int]:
    return [int(n) for n in pattern.findall(contract())]


def citing_files() -> list[Path]:
    files = {path for glob in CITING for path in ROOT.glob(glob)}
    return sorted(p for p in files if ".venv" not in p.parts and p.is_file())


def citations(pattern: re.Pattern[str]) -> dict[int, list[str]]:
    """Each cited number, with the places (path:line) that cite it."""
    cited: dict[int, list[str]] = {}
    for path in citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for n in pattern.findall(line):
                cited.setdefault(int(n), []).append(f"{path.relative_to(ROOT)}:{lineno}")
    return cited


def text_files() -> list[Path]:
    """The repository's files as git sees them (tracked, and new ones not ignored); a plain
    walk when git is not there (an exported tree)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        paths = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "venv", "node_modules", "__pycache__", "test-output", "var"}
        paths = [p for p in ROOT.rglob("*") if not skip.intersection(p.relative_to(ROOT).parts)]
    found = []
    for path in paths:
        if not path.is_file():
            continue  # deleted in the work tree
        data = path.read_bytes()
        if b"\0" not in data[:8192]:
            found.append(path)
    return found


def test_rules_r1_to_r27_are_each_defined_once_in_order():
    numbers = defined(RULE_DEFINITION)
    missing = sorted(set(RULES) - set(numbers))
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    assert not missing, f"docs/CONTRACT.md does not define rule(s) {missing}"
    assert not repeated, f"docs/CONTRACT.md defines rule(s) {repeated} more than once"
    assert numbers == sorted(numbers), f"rules out of order in docs/CONTRACT.md: {numbers}"


def test_sections_1_to_10_are_each_defined_once_in_order():
    numbers = defined(SECTION_DEFINITION)
    assert numbers == list(SECTIONS), f"docs/CONTRACT.md sections: {numbers}"


def test_every_cited_rule_is_defined():
    rules = set(defined(RULE_DEFINITION))
    undefined = {n: at for n, at in citations(RULE_CITATION).items() if n not in rules}
    assert not undefined, f"rules cited but not defined in docs/CONTRACT.md: {undefined}"


def test_every_cited_section_is_defined():
    sections = set(defined(SECTION_DEFINITION))
    undefined = {n: at for n, at in citations(SECTION_CITATION).items() if n not in sections}
    assert not undefined, f"sections cited but not defined in docs/CONTRACT.md: {undefined}"


def test_the_citations_are_found_at_all():
    """Guards the test itself: a broken glob or pattern would make the checks above pass."""
    cited = citations(RULE_CITATION)
    assert {1, 5, 21, 22} <= set(cited)
    assert any(at.startswith("durablebeat/") for at in cited[5])
    assert any(at.startswith("tests/") for at in cited[21])
    assert any(at.startswith("README.md:") for at in cited[1])


def test_the_readme_links_the_contract():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/CONTRACT.md)" in readme


def test_no_text_file_points_outside_the_repository():
    files = text_files()
    assert ROOT / "README.md" in files
    outside = [
        f"{path.relative_to(ROOT)}:{lineno}"
        for path in files
        for lineno, line in enumerate(
            path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        )
        if OUTSIDE in line
    ]
    assert not outside, f"references to {OUTSIDE} (outside the repository): {outside}"

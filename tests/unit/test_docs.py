"""The docs against the code: the module map (docs/development.md) names every module of the
package and no module that is gone, the settings and findings tables (docs/configuration.md,
docs/operations.md) list what the code defines, and the README stays a short user guide
that links every page, so that none of it can go stale.

The map is the first fenced block of the development page's "Module map" section. Each line
is names, then two or more spaces, then what they are: a name ending in ``/`` is a folder,
and the lines indented under it are inside it; several names may share a line (``apps.py
checks.py``) and a name may hold a path (``management/commands/durablebeat.py``). A module is
every ``.py`` file under ``durablebeat/`` except ``__init__.py`` and the migrations.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "durablebeat"
DOCS = ROOT / "docs"
SECTION = "## Module map"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: between the names of a line and their description
GAP = re.compile(r" {2,}")


def map_section(page: str) -> str:
    start = page.index(f"\n{SECTION}\n")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else len(page)]


def module_map(page: str) -> str:
    block = FENCE.search(map_section(page))
    assert block is not None, f"docs/development.md's {SECTION!r} section has no fenced map"
    return block.group(1)


def mapped_paths(block: str) -> list[str]:
    """Every path the map names (folders end with ``/``), in the map's order."""
    folders: list[tuple[int, str]] = []  # (indent, folder) of the lines enclosing this one
    paths = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = "".join(folder for _, folder in folders)
        names = GAP.split(line.strip(), maxsplit=1)[0].split()
        paths += [parent + name for name in names]
        if len(names) == 1 and names[0].endswith("/"):
            folders.append((indent, names[0]))
    return paths


def mapped_modules() -> list[str]:
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    return [p for p in mapped_paths(module_map(text)) if p.startswith("durablebeat/")]


def tree_modules() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.relative_to(PACKAGE).parts
    }


def test_the_map_is_read_with_its_folders_and_shared_lines():
    block = (
        "pkg/            the app\n"
        "  apps.py x.py  two on a line\n"
        "  core/         a folder\n"
        "    clock.py    in it\n"
        "  a/b/cmd.py    a path\n"
        "tests/unit      not a module\n"
    )
    assert mapped_paths(block) == [
        "pkg/",
        "pkg/apps.py",
        "pkg/x.py",
        "pkg/core/",
        "pkg/core/clock.py",
        "pkg/a/b/cmd.py",
        "tests/unit",
    ]
    assert {"durablebeat/beat/engine.py", "durablebeat/conf.py"} <= set(mapped_modules())
    assert "durablebeat/management/commands/durablebeat.py" in tree_modules()


def test_every_module_is_in_the_map():
    missing = sorted(tree_modules() - {p for p in mapped_modules() if p.endswith(".py")})
    assert not missing, f"modules missing from docs/development.md's map: {missing}"


def test_the_map_names_no_module_that_does_not_exist():
    gone = sorted(
        p
        for p in mapped_modules()
        if not (p.endswith("/") and (ROOT / p).is_dir()) and p not in tree_modules()
    )
    assert not gone, f"docs/development.md's map names what is not in the tree: {gone}"


def test_the_map_names_each_module_once():
    names = mapped_modules()
    twice = sorted({p for p in names if names.count(p) > 1})
    assert not twice, f"docs/development.md's map names these more than once: {twice}"


# --- what the docs' tables and the map say against what the code holds ------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")
CONTRACT = (ROOT / "docs" / "CONTRACT.md").read_text(encoding="utf-8")


def section(page: str, title: str) -> str:
    """The text of docs/``page`` under the heading ``title`` (any level), to the next heading
    of any level."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = re.search(rf"^#+ {re.escape(title)}\n", text, re.MULTILINE)
    assert start is not None, f"docs/{page} has no section {title!r}"
    end = re.search(r"^#+ ", text[start.end() :], re.MULTILINE)
    return text[start.end() : start.end() + end.start() if end else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in ``text``, header and rule left out."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and not set(cells[0]) <= {"-", " "}:
            rows.append(cells)
    return rows[1:] if rows else rows


def test_every_setting_is_in_the_settings_table_and_no_other():
    from durablebeat.conf import setting_names

    listed = {row[0].strip("`") for row in table_rows(section("configuration.md", "Settings"))}
    defined = {f"DURABLEBEAT_{name}" for name in setting_names()}
    assert listed == defined, (
        f"missing from docs/configuration.md's Settings: {sorted(defined - listed)}; "
        f"listed but not settings: {sorted(listed - defined)}"
    )


def test_the_findings_table_has_every_code_with_its_severity():
    from durablebeat.ops.health import SEVERITIES

    title = "`manage.py durablebeat check` (R17)"
    rows = table_rows(section("operations.md", title))
    listed = {row[0].strip("`"): row[1] for row in rows if len(row) > 2}
    documented = {code: severity.name.lower() for code, severity in SEVERITIES.items()}
    assert listed == documented


def test_every_rule_of_the_contract_names_an_owning_module_in_the_map():
    """A newcomer finds the module that owns each rule from the map: its line names it."""
    rules = {int(n) for n in re.findall(r"^- \*\*R(\d+)\*\*", CONTRACT, re.MULTILINE)}
    block = module_map((DOCS / "development.md").read_text(encoding="utf-8"))
    package_lines = [line for line in block.splitlines() if line.startswith("  ")]
    owned = {int(n) for line in package_lines for n in re.findall(r"\bR(\d+)\b", line)}
    assert rules, "docs/CONTRACT.md defines no rule"
    assert not rules - owned, f"rules no module line of the map names: {sorted(rules - owned)}"


def test_the_readme_is_a_short_guide_that_links_every_page():
    """The README is read in two minutes: at most 300 lines, a table of contents, and a link
    to each page of docs/, where everything else lives."""
    lines = README.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines (at most 300)"
    assert "## Contents" in README
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    unlinked = [p for p in pages if f"](docs/{p}" not in README]
    assert not unlinked, f"README.md links no: {unlinked}"
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    contents = section_of_readme("Contents")
    missing = [h for h in headings if h != "Contents" and f"[{h}]" not in contents]
    assert not missing, f"README's contents list no: {missing}"


def section_of_readme(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]

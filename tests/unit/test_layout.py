"""The package's layout is its architecture: no import cycle among durablebeat's modules, and
a pure core.

Every import counts, at module level or inside a function: a function-local import that
closes a cycle only hides it. An import under ``if TYPE_CHECKING:`` names a type and is
never executed, so it is not an edge here."""

from __future__ import annotations

import ast
from collections.abc import Callable, Container
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "durablebeat"
#: what the pure core (schedule math, policy, the clock seam) must never import
NOT_IN_CORE = ("django.db", "durablebeat.beat", "durablebeat.worker", "durablebeat.ops")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports, at any depth of its code, as dotted names."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = _type_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:  # ``from pkg import module`` imports that module
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in MODULES else source)
    return found


def _graph() -> dict[str, set[str]]:
    return {name: {m for m in _imports(name) if m in MODULES and m != name} for name in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_layout_is_read_from_the_tree():
    assert {"durablebeat.core.timing", "durablebeat.beat.engine", "durablebeat.ops.health"} <= set(
        MODULES
    )
    assert "durablebeat.core.clock" in _graph()["durablebeat.core.timing"]


def test_no_import_cycle_among_durablebeat_modules():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _reached(
    start: str, imports: Callable[[str], set[str]], follow: Container[str] = MODULES
) -> dict[str, list[str]]:
    """Everything ``start`` imports through every import, each with the chain of modules
    that leads to it (the first found): the modules in ``follow`` (the package's own) are
    followed, any other import is an end."""
    chains: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        name = todo.pop()
        for found in sorted(imports(name)):
            if found in chains:
                continue
            chains[found] = [*chains[name], found]
            if found in follow:
                todo.append(found)
    return chains


def test_the_core_imports_no_database_and_nothing_of_beat_worker_or_ops():
    """Through every import, not one hop: core -> durablebeat.enums -> django.db is one."""
    for name in (m for m in MODULES if m.startswith("durablebeat.core")):
        chains = _reached(name, _imports)
        bad = sorted(" -> ".join(chain) for m, chain in chains.items() if m.startswith(NOT_IN_CORE))
        assert not bad, f"{name} imports {bad}"


def test_the_purity_check_follows_imports_to_any_depth():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "django.db"}}
    chains = _reached("a", graph.__getitem__, follow=graph)
    assert chains["django.db"] == ["a", "b", "c", "django.db"]
    real = _reached("durablebeat.enums", _imports)
    assert real["django.db"] == ["durablebeat.enums", "django.db"]
    assert "durablebeat.core.enums" in real


def test_the_worker_side_never_imports_the_beat_side():
    """One way only: the beat's reclaim round applies what the worker side's completion
    applies; worker/ (tracking, completion, backlog) needs nothing of beat/."""
    for name in (m for m in MODULES if m.startswith("durablebeat.worker")):
        bad = sorted(m for m in _imports(name) if m.startswith("durablebeat.beat"))
        assert not bad, f"{name} imports {bad}"

"""Issue 39, without processes: the steps the README's Quickstart and docs/from-code.md give
(tests/docs_blocks.py) are complete and compile, and every task they schedule is defined
where Celery's ``autodiscover_tasks()`` finds it. tests/e2e/test_docs_verbatim.py runs them."""

from __future__ import annotations

import ast
import re

import pytest

from tests import docs_blocks
from tests.docs_blocks import PAGES, Step

ALL = [step for page in PAGES for step in docs_blocks.steps(page)]
#: a task name as the pages write one: the app's ``tasks`` module and the function
TASK_NAME = re.compile(r"^(?P<app>\w+)\.tasks\.(?P<function>\w+)$")


def files() -> dict[str, str]:
    """Each file the pages' steps make, as they leave it."""
    made: dict[str, str] = {}
    for step in ALL:
        if step.action == "write":
            made[step.path] = step.code
        elif step.action == "append":
            made[step.path] = made.get(step.path, "") + "\n" + step.code
    return made


def literals(code: str) -> list[ast.AST]:
    return list(ast.walk(ast.parse(code)))


def test_the_pages_give_every_step_of_a_project_from_scratch():
    made = files()
    assert {"shop/celery.py", "shop/__init__.py", "shop/settings.py"} <= made.keys()
    assert {"news/tasks.py", "news/models.py", "news/digests.py"} <= made.keys()
    commands = [c for s in ALL if s.action == "run" for c in s.commands()]
    assert "python manage.py migrate" in commands and "python manage.py check" in commands
    started = [c.split()[:4] for s in ALL if s.action == "start" for c in s.commands()]
    assert started == [["celery", "-A", "shop", "worker"], ["celery", "-A", "shop", "beat"]]
    assert [s.action for s in ALL].count("restart") == 1  # after from-code's new task
    assert any("durablebeat.models import Run" in s.code for s in ALL if s.action == "shell")


@pytest.mark.parametrize(
    "page_line_code",
    [(page, line, code) for page in PAGES for line, code in docs_blocks.python_blocks(page)],
    ids=lambda v: f"{v[0]}:{v[1]}",
)
def test_every_python_block_of_the_pages_compiles(page_line_code: tuple[str, int, str]):
    page, line, code = page_line_code
    compile(code, f"{page}:{line}", "exec")


def test_every_file_the_steps_make_compiles():
    for path, code in files().items():
        if path != "shop/settings.py":  # the steps append to startproject's own
            compile(code, path, "exec")


def test_every_scheduled_task_is_defined_in_an_installed_apps_tasks_module():
    """The README's first example named ``shop.tasks.cleanup``, in the project package,
    which ``autodiscover_tasks()`` never imports: ``migrate`` stopped on durablebeat.E003."""
    made = files()
    installed = {
        node.value
        for node in literals(made["shop/settings.py"])
        if isinstance(node, ast.AugAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "INSTALLED_APPS"
        for node in ast.walk(node.value)
        if isinstance(node, ast.Constant)
    }
    names = {
        node.value
        for step in ALL
        if step.lang == "python"
        for node in literals(step.code)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if TASK_NAME.match(node.value)
    }
    for name in names:
        match = TASK_NAME.match(name)
        assert match is not None
        assert match["app"] in installed, f"{name}: {match['app']!r} is not in INSTALLED_APPS"
        module = made.get(f"{match['app']}/tasks.py")
        assert module is not None, f"{name}: no step writes {match['app']}/tasks.py"
        defined = {
            node.name
            for node in literals(module)
            if isinstance(node, ast.FunctionDef)
            and any(ast.unparse(d) == "shared_task" for d in node.decorator_list)
        }
        assert match["function"] in defined, f"{name}: no @shared_task {match['function']}"
    assert {"news.tasks.cleanup", "news.tasks.send_digest"} <= names


def queues_named(code: str) -> set[str]:
    """The queues ``code`` sends to: a ``"queue"`` key of a dict, a ``queue=`` argument."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Dict):
            pairs = list(zip(node.keys, node.values, strict=True))
        elif isinstance(node, ast.Call):
            pairs = [(ast.Constant(k.arg), k.value) for k in node.keywords]
        else:
            continue
        found |= {
            value.value
            for key, value in pairs
            if isinstance(key, ast.Constant) and key.value == "queue"
            if isinstance(value, ast.Constant)
        }
    return found


def test_the_worker_consumes_every_queue_the_steps_send_to():
    """docs/from-code.md's digest went to queue ``mail``, which the README's worker did not
    consume: its runs ended no_news."""
    old_example = 'api.add_schedule("d", "t", 60, options={"queue": "mail"})'
    assert queues_named(old_example) == queues_named('{"queue": "mail"}') == {"mail"}
    queues = {q for step in ALL if step.lang == "python" for q in queues_named(step.code)}
    worker = next(c for s in ALL if s.action == "start" for c in s.commands() if " worker" in c)
    argv = worker.split()
    consumed = set(argv[argv.index("-Q") + 1].split(",")) if "-Q" in argv else {"celery"}
    assert queues <= consumed, f"{worker!r} consumes no {sorted(queues - consumed)}"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- docs-test: write a.py -->\ntext\n", "is not followed by a block"),
        ("<!-- docs-test: write -->\n```python\nx = 1\n```\n", "needs a path"),
        ("<!-- docs-test: run a.py -->\n```sh\nls\n```\n", "takes none"),
        ("<!-- docs-test: sing -->\n```sh\nls\n```\n", "unknown docs-test action"),
    ],
)
def test_a_marker_that_is_no_step_is_an_error_naming_its_line(text: str, error: str):
    with pytest.raises(AssertionError, match=rf"page.md:2: .*{error}"):
        docs_blocks.steps("page.md", "\n" + text)


def test_a_marked_block_is_read_as_written():
    text = "<!-- docs-test: append a/b.py -->\n```python\nX = 1  # one\n```\n"
    assert docs_blocks.steps("p.md", text) == [
        Step("p.md", 1, "append", "a/b.py", "python", "X = 1  # one\n")
    ]
    run = docs_blocks.steps("p.md", "<!-- docs-test: run -->\n```sh\n# c\nls -l  # d\n\n```\n")
    assert run[0].commands() == ["ls -l"]

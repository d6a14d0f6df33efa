"""R32, expand then contract: every migration leaves the previous release able to do all it
does against the migrated schema, while a deploy rolls and after a rollback.

Two proofs. The schema: every NOT NULL column a migration added to an existing table has a
default in the database (a release whose models do not name the column inserts without
it). The code: the previous release itself, checked out beside this tree (``git
worktree``), runs against this database migrated to the newest migration (whatever
migrations exist) and does what its beat, admin and worker do (``previous_release.py``);
this release then reads what it wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("previous_release.py")
#: the release of 2026-12-04, the last before 0008: the one whose inserts 0008 broke
#: (``null value in column "custom_schedule"``) until 0013 gave the columns their defaults
BEFORE_0008 = "ab15ec50ef98f08e09dec4fe475232f6ca920a3d"


def previous_release() -> str:
    """The commit of the newest release in CHANGELOG.md: the one place that names it, moved
    by each release."""
    text = (ROOT / "CHANGELOG.md").read_text()
    released = re.search(r"^## \[\d[^\]]*\].*?^Commit: `([0-9a-f]{7,40})`", text, re.M | re.S)
    assert released, "CHANGELOG.md: the newest release has no 'Commit: `<hash>`' line"
    return released.group(1)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def checkout() -> Iterator[Any]:
    """``checkout(commit)``: that release's tree in a temporary git worktree. A commit this
    clone lacks fails the test (never a skip): the proof would silently not run."""
    made: list[str] = []

    def check_out(commit: str) -> Path:
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
            pytest.fail(
                f"release {commit} is not in this clone: fetch it (git fetch origin {commit}; "
                "a shallow clone needs git fetch --unshallow)"
            )
        path = tempfile.mkdtemp(prefix=f"durablebeat-{commit[:7]}-")
        done = _git("worktree", "add", "--detach", path, commit)
        assert done.returncode == 0, done.stderr
        made.append(path)
        return Path(path)

    yield check_out
    for path in made:
        _git("worktree", "remove", "--force", path)


def _database_url() -> str:
    """The test database, for a process that reads ``DATABASE_URL`` (``tests/settings.py``)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    scheme = "postgres" if connection.vendor == "postgresql" else "mysql"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"{scheme}://{auth}@{s['HOST'] or '127.0.0.1'}{port}/{s['NAME']}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "release", [pytest.param(None, id="previous"), pytest.param(BEFORE_0008, id="before-0008")]
)
def test_a_previous_release_does_all_it_does_on_the_migrated_schema(
    release: str | None, checkout: Any
) -> None:
    from durablebeat.models import Run, Schedule, WorkerHeartbeat

    tree = checkout(release or previous_release())
    env = {**os.environ, "DATABASE_URL": _database_url(), "PYTHONPATH": ""}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tree)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(tree)), result["package"]
    assert result["fired"] == ["old-admin", "old-code"]
    # what it wrote, as this release reads it
    runs = Run.objects.filter(task_id__in=result["task_ids"])
    assert sorted(runs.values_list("schedule__name", "state")) == [
        ("old-admin", "succeeded"),
        ("old-code", "succeeded"),
    ]
    for schedule in Schedule.objects.filter(name__in=["old-admin", "old-code"]):
        schedule.full_clean()
        assert (schedule.relative, schedule.custom_schedule, schedule.compression) == (
            False,
            "",
            "",
        )
    assert WorkerHeartbeat.objects.filter(worker="old-worker@host").exists()


@pytest.mark.django_db
def test_every_column_added_after_its_table_is_nullable_or_has_a_database_default() -> None:
    """A NOT NULL column with a default only Django knows fails every insert of a release
    whose models do not name it (0008's ``custom_schedule``, until 0013). Columns made with
    their table are exempt: no earlier release writes to a table it does not know."""
    from django.apps import apps
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.operations import CreateModel

    loader = MigrationLoader(connection)
    born: dict[str, set[str]] = {}  # model -> its fields as its CreateModel made them
    for leaf in loader.graph.leaf_nodes("durablebeat"):
        for app, name in loader.graph.forwards_plan(leaf):
            for op in loader.get_migration(app, name).operations if app == "durablebeat" else ():
                if isinstance(op, CreateModel):
                    born[op.name_lower] = {field for field, _ in op.fields}
    bare = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("durablebeat").get_models():
            table = model._meta.db_table
            described = {
                c.name: c for c in connection.introspection.get_table_description(cursor, table)
            }
            for field in model._meta.concrete_fields:
                if field.name in born[model._meta.model_name]:
                    continue
                column = described[field.column]
                if not column.null_ok and column.default is None:
                    bare.append(f"{table}.{field.column}")
    assert bare == [], f"NOT NULL without a database default: {bare}"

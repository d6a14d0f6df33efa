import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_models_and_migrations_agree():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_0012_marks_the_runs_already_refused_and_no_other():
    """R21: the runs whose message was refused before 0012 (found then by their detail's
    first words) carry ``failure = unpublishable`` after it, their detail unchanged; a run
    whose body failed, and any run not failed, do not."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before = [("durablebeat", "0011_run_reason_backfill")]
    after = [("durablebeat", "0012_run_failure")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    schedule = old.get_model("durablebeat", "Schedule").objects.create(
        name="refused", task="tasks.t", kind="interval", every=dt.timedelta(seconds=60)
    )
    now = timezone.now()
    refused = "not published, the message was refused: OverflowError: expires"
    made = {}
    for key, state, detail in [
        ("refused", "failed", refused),
        ("body", "failed", ""),
        ("succeeded", "succeeded", refused),
    ]:
        made[key] = (
            old.get_model("durablebeat", "Run")
            .objects.create(
                schedule_id=schedule.pk,
                slot=now - dt.timedelta(minutes=len(made)),
                state=state,
                detail=detail,
                claimed_at=now,
            )
            .pk
        )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    runs = executor.loader.project_state(after).apps.get_model("durablebeat", "Run").objects
    assert dict(runs.values_list("pk", "failure")) == {
        made["refused"]: "unpublishable",
        made["body"]: "",
        made["succeeded"]: "",
    }
    assert runs.get(pk=made["refused"]).detail == refused
    # A beat of the previous release, still running while the deploy rolls, inserts runs
    # without the new column: the database takes them (Django keeps no column default).
    late = old.get_model("durablebeat", "Run").objects.create(
        schedule_id=schedule.pk, slot=now + dt.timedelta(minutes=1), claimed_at=now
    )
    assert runs.get(pk=late.pk).failure is None
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

"""R28: beat reads once the settings Celery's ``send_task`` reads for every message
(``publishing.keep_per_message_conf``), with Celery's values, and puts them back at close."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from celery import Celery
from celery.utils import collections as celery_collections

from durablebeat.beat import publishing


def _app(**settings: Any) -> Celery:
    """An app configured the way Django projects do: from an object, namespace CELERY."""
    app = Celery("per_message", set_as_current=False)
    config = SimpleNamespace(CELERY_BROKER_URL="memory://", **settings)
    app.config_from_object(config, namespace="CELERY")
    return app


def test_every_setting_send_task_reads_for_a_message_is_one_beat_keeps(monkeypatch):
    """Goes red when a Celery version reads another setting per message: add it to
    PER_MESSAGE_CONF (it is only slower until then, never wrong)."""
    app = _app()
    read: list[str] = []
    original = celery_collections.ConfigurationView.__getitem__

    def recording(self: Any, key: str) -> Any:
        read.append(key)
        return original(self, key)

    with app.producer_or_acquire() as producer:
        app.send_task("t.first", producer=producer, expires=30)  # the reads made once
        monkeypatch.setattr(celery_collections.ConfigurationView, "__getitem__", recording)
        app.send_task(
            "t.x",
            args=[1],
            kwargs={"a": 1},
            producer=producer,
            expires=30,
            priority=3,
            headers={"h": 1},
        )
    assert read, "send_task read no setting: the recording missed"
    assert set(read) <= set(publishing.PER_MESSAGE_CONF), set(read)


def test_the_kept_values_are_celerys_and_undo_puts_the_configuration_back():
    app = _app(CELERY_TASK_DEFAULT_QUEUE="jobs", CELERY_TIMEZONE="Europe/Paris")
    app.conf.task_repr_maxlevels = 7  # the app's own change: kept as it is, never undone
    before = {key: app.conf[key] for key in publishing.PER_MESSAGE_CONF}
    undo = publishing.keep_per_message_conf(app)
    changes = app.conf.changes
    assert {key: changes[key] for key in publishing.PER_MESSAGE_CONF} == before
    assert (changes["task_default_queue"], changes["timezone"]) == ("jobs", "Europe/Paris")
    undo()
    assert set(changes) & set(publishing.PER_MESSAGE_CONF) == {"task_repr_maxlevels"}
    assert app.conf.task_repr_maxlevels == 7
    assert app.conf.task_default_queue == "jobs"  # read from the settings again

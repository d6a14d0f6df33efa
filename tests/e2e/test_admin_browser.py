"""The admin in a real headless Chromium: log in, create a crontab schedule, see a bad
field refused with its message, run it now and see the run in the history.

Chromium and the screenshots: ``tests/e2e/browser.py``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser import chromium, fill, log_in, shot

from .harness import QUIET

pytestmark = [QUIET, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

#: run now sends to the real broker; a queue of its own, removed afterwards
QUEUE = f"durablebeat-browser-test{os.environ.get('DURABLEBEAT_TEST_SUFFIX', '')}"


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium(1600, 1000) as driver:
        yield driver


@pytest.fixture
def broker_queue() -> Iterator[str]:
    yield QUEUE
    import redis
    from django.conf import settings

    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(QUEUE)


def test_admin_create_refuse_run_now_and_history(browser, live_server, broker_queue):
    from django.contrib.auth.models import User

    from durablebeat.beat.engine import Engine
    from durablebeat.core import clock
    from durablebeat.enums import Reason
    from durablebeat.models import Boot, Run, Schedule

    User.objects.create_superuser("admin", "admin@example.com", "pw")
    # Beat, in this process, ticked by hand: its boot is alive and it sets next fires.
    beat = Engine(code_entries=[], publish=lambda claim: None)
    beat.tick(clock.now())
    b = browser

    log_in(b, live_server.url, "admin", "pw")
    assert "Select schedule to change" in b.title

    # Create a crontab schedule with a bad minute: refused, with the field's message.
    b.get(f"{live_server.url}/admin/durablebeat/schedule/add/")
    fill(b, "name", "morning-digest")
    fill(b, "task", "tests.e2eapp.tasks.record")
    Select(b.find_element(By.NAME, "kind")).select_by_value("crontab")
    fill(b, "minute", "61")
    fill(b, "hour", "8")
    fill(b, "day_of_week", "mon-fri")
    fill(b, "timezone", "Europe/Berlin")
    b.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    fill(b, "queue", broker_queue)  # in the collapsed "Message" section
    b.find_element(By.NAME, "_save").click()
    error = b.find_element(By.CSS_SELECTOR, ".field-minute .errorlist")
    assert "61" in error.text
    b.execute_script("arguments[0].scrollIntoView({block: 'center'})", error)
    shot(b, "1-bad-minute-refused")
    assert not Schedule.objects.exists()

    fill(b, "minute", "0")
    b.find_element(By.NAME, "_save").click()
    assert "was added successfully" in b.find_element(By.CSS_SELECTOR, ".messagelist").text
    row = b.find_element(By.XPATH, "//tr[.//a[text()='morning-digest']]")
    assert "At 08:00, Monday through Friday (Europe/Berlin)" in row.text
    schedule = Schedule.objects.get(name="morning-digest")
    assert schedule.queue == broker_queue
    beat.tick(clock.now())  # picks the new schedule up: its next fire is the next 08:00
    schedule.refresh_from_db()
    assert schedule.next_fire_at is not None

    # Run now, from the schedule's page; then the run history.
    b.find_element(By.LINK_TEXT, "morning-digest").click()
    b.find_element(By.CSS_SELECTOR, "button.durablebeat-run-now").click()
    message = b.find_element(By.CSS_SELECTOR, ".messagelist").text
    assert "sent now" in message, message
    shot(b, "3-run-now-sent")
    run = Run.objects.get(schedule=schedule)
    assert run.reason == Reason.MANUAL
    recent = b.find_element(By.CSS_SELECTOR, ".field-recent_runs")
    assert "Manual" in recent.text
    b.execute_script("arguments[0].scrollIntoView({block: 'center'})", recent)
    shot(b, "4-schedule-page-recent-runs")

    b.get(f"{live_server.url}/admin/durablebeat/schedule/")
    row = b.find_element(By.XPATH, "//tr[.//a[text()='morning-digest']]")
    assert "in " in row.find_element(By.CSS_SELECTOR, ".field-next_fire").text
    assert not b.find_elements(By.CSS_SELECTOR, ".durablebeat-health")  # all is well
    shot(b, "2-schedule-list")

    b.get(f"{live_server.url}/admin/durablebeat/schedule/{schedule.pk}/change/")
    b.find_element(By.XPATH, "//a[normalize-space()='Run history']").click()
    history = b.find_element(By.ID, "result_list").text
    assert "morning-digest" in history and "Manual" in history and "Published" in history
    shot(b, "5-run-history")

    # Beat stops cleanly: a deploy, quiet while the next boot may come (R27) ...
    beat.close(clock.now())
    b.get(f"{live_server.url}/admin/durablebeat/schedule/")
    assert not b.find_elements(By.CSS_SELECTOR, ".durablebeat-health")
    # ... and none came within the deploy grace: the schedule list says so above the list.
    gone = clock.now() - dt.timedelta(minutes=10)
    Boot.objects.filter(pk=beat.boot_id).update(heartbeat_at=gone, stopped_at=gone)
    b.get(f"{live_server.url}/admin/durablebeat/schedule/")
    summary = b.find_element(By.CSS_SELECTOR, ".durablebeat-health").text
    assert "durablebeat check would fail (critical)" in summary
    assert "no_beat no beat is running" in summary
    shot(b, "6-health-summary")

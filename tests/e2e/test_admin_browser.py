"""The admin in a real headless Chromium: log in, create a crontab schedule, see a bad
field refused with its message, run it now and see the run in the history.

Needs Debian's ``chromium`` and ``chromium-driver`` and Selenium (``scripts/system-tools.sh``
installs them). Screenshots go to ``test-output/screenshots/`` (kept out of git).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
#: run now sends to the real broker; a queue of its own, removed afterwards
QUEUE = f"durablebeat-browser-test{os.environ.get('DURABLEBEAT_TEST_SUFFIX', '')}"
MISSING = "Chromium, chromedriver or Selenium is missing (scripts/system-tools.sh installs them)"

try:
    from selenium import webdriver
except ImportError:
    webdriver = None
if CHROMIUM is None or CHROMEDRIVER is None or webdriver is None:
    if os.environ.get("CI"):
        # CI runs scripts/system-tools.sh first: a skip there would hide a broken install.
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING, allow_module_level=True)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1600,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def broker_queue() -> Iterator[str]:
    yield QUEUE
    import redis
    from django.conf import settings

    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(QUEUE)


def shot(driver: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def fill(driver: Any, name: str, value: str) -> None:
    box = driver.find_element(By.NAME, name)
    box.clear()
    box.send_keys(value)


def test_admin_create_refuse_run_now_and_history(browser, live_server, broker_queue):
    from django.contrib.auth.models import User

    from durablebeat.beat.engine import Engine
    from durablebeat.core import clock
    from durablebeat.enums import Reason
    from durablebeat.models import Run, Schedule

    User.objects.create_superuser("admin", "admin@example.com", "pw")
    # Beat, in this process, ticked by hand: its boot is alive and it sets next fires.
    beat = Engine(code_entries=[], publish=lambda claim: None)
    beat.tick(clock.now())
    b = browser

    b.get(f"{live_server.url}/admin/login/?next=/admin/durablebeat/schedule/")
    fill(b, "username", "admin")
    fill(b, "password", "pw")
    b.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
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

    # Beat stops: the schedule list says so above the list.
    beat.close(clock.now())
    b.get(f"{live_server.url}/admin/durablebeat/schedule/")
    summary = b.find_element(By.CSS_SELECTOR, ".durablebeat-health").text
    assert "durablebeat check would fail (critical)" in summary
    assert "no_beat no beat is running" in summary
    shot(b, "6-health-summary")

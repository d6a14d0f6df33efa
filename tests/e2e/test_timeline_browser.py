"""The timeline (R19) as an operator tries it, in a real headless Chromium, on a database
prepared with a starved schedule, a stuck one, a schedule firing on every deploy, a delivery
slot caught up at a deploy, a failing schedule and an orphaned run. Each is seen on the
timeline by its mark's shape and words, and a mark leads to its run. Where the lanes are
wider than the page they open at the window's recent end, keep their names in view, and
boot labels a minute apart never overlap, each measured in the page.

Its screenshots are the pictures of docs/operations.md, kept in ``tests/e2e/screenshots/``
(``DURABLEBEAT_UPDATE_SCREENSHOTS=1`` takes them again; see ``tests/e2e/browser.py``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser import chromium, log_in, shot

from .harness import QUIET

pytestmark = [QUIET, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

H = dt.timedelta(hours=1)
MIN = dt.timedelta(minutes=1)
TASK = "tests.e2eapp.tasks.record"


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium(1400, 900) as driver:
        yield driver


def prepare(now: dt.datetime) -> dict[str, Any]:
    """A day of deploys: eight boots, and what they did to six schedules."""
    from durablebeat.enums import Reason, RunState
    from durablebeat.models import Boot, Run, Schedule

    def schedule(name: str, **fields: Any) -> Schedule:
        fields.setdefault("every", dt.timedelta(hours=1))
        return Schedule.objects.create(name=name, task=TASK, next_fire_at=now + H, **fields)

    def run(row: Schedule, slot: dt.datetime, boot: Boot | None, **fields: Any) -> Run:
        fields.setdefault("state", RunState.SUCCEEDED)
        took = fields.pop("took", 40)
        fired = slot + dt.timedelta(seconds=2)
        return Run.objects.create(
            schedule=row,
            slot=slot,
            boot=boot,
            claimed_at=fired,
            published_at=fired,
            started_at=fired + dt.timedelta(seconds=1),
            finished_at=fired + dt.timedelta(seconds=1 + took),
            task_id=str(uuid.uuid4()),
            **fields,
        )

    # Five deploys 3 h apart, and one near the window's end that restarted twice, a minute
    # apart: eight boots, three of them with labels that would cover one another.
    starts = [now - (22 - 3 * i) * H + 7 * MIN for i in range(5)]
    starts += [now - H + (7 + i) * MIN for i in range(3)]
    boots = []
    for i, started in enumerate(starts):
        stopped = starts[i + 1] - dt.timedelta(seconds=5) if i + 1 < len(starts) else None
        boots.append(
            Boot.objects.create(
                id=uuid.uuid4(),
                hostname=f"web-{i % 2 + 1}",
                pid=1000 + i,
                started_at=started,
                heartbeat_at=stopped or now,
                stopped_at=stopped,
            )
        )

    def boot_at(at: dt.datetime) -> Any:
        earlier = [b for b in boots if b.started_at <= at]
        return max(earlier, key=lambda b: b.started_at, default=None)

    starved = schedule("cleanup-every-24h", every=dt.timedelta(days=1))
    hourly = schedule("sync-crm")
    nightly = schedule("nightly-report", every=dt.timedelta(days=1))
    digest = schedule(
        "morning-digest", kind="crontab", minute="0", hour="8", every=None, catch_up=True
    )
    feed = schedule("import-feed")
    stuck = schedule(
        "export-warehouse",
        stuck_since=now - 9 * H,
        stuck_reason="previous run still started (run since 9 h)",
    )
    top = now.replace(minute=0, second=0, microsecond=0)
    for h in range(1, 24):
        slot = top - h * H
        failing = h < 7
        run(
            hourly,
            slot,
            boot_at(slot),
            state=RunState.FAILED if failing else RunState.SUCCEEDED,
            error="ConnectionError: crm.example is down" if failing else "",
            took=30 + h,
        )
        if h == 10:
            lost = run(feed, slot, boot_at(slot), state=RunState.LOST, detail="worker gone")
        elif h < 9:
            run(stuck, slot, boot_at(slot), state=RunState.SKIPPED, detail="previous run started")
        elif h != 10:
            run(feed, slot, boot_at(slot))
            run(stuck, slot, boot_at(slot), took=600 + 30 * h)
    for b in boots:  # every boot fires it again: the startup grace of a daily job
        run(nightly, b.started_at + MIN, b, reason=Reason.STARTUP_GRACE)
    caught = run(digest, boots[5].started_at + MIN, boots[5], reason=Reason.CATCH_UP)
    run(hourly, now - 20 * MIN, None, reason=Reason.MANUAL, state=RunState.STARTED)
    return {
        "starved": starved,
        "lost": lost,
        "caught": caught,
        "stuck": stuck,
        "nightly": nightly,
        "boots": boots,
    }


def wait_for(driver: Any, css: str) -> Any:
    return WebDriverWait(driver, 10).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


#: where things are in the lanes' scroll box, in the page's pixels: the box, the drawing in
#: it, each lane's name (and whether it is what a click there reaches), each boot's label
MEASURE = """
const box = document.querySelector('figure.tl-figure');
const rect = e => {
  const r = e.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom];
};
const onTop = e => {
  const [l, t, r, b] = rect(e);
  return e.contains(document.elementFromPoint((l + r) / 2, (t + b) / 2));
};
return {
  box: rect(box),
  canvas: rect(box.querySelector('.tl-canvas')),
  overflow: box.scrollWidth - box.clientWidth,
  names: [...box.querySelectorAll('text.tl-name')].map(e => [e.textContent, rect(e), onTop(e)]),
  labels: [...box.querySelectorAll('text.tl-boot-label')].map(e => [e.textContent, rect(e)]),
};
"""


#: the drawn width of each text in ``arguments[0]``, set as a boot's label is
PROBE = """
const label = document.querySelector('text.tl-boot-label');
return arguments[0].map(text => {
  const probe = label.cloneNode();
  probe.textContent = text;
  label.parentNode.appendChild(probe);
  const width = probe.getComputedTextLength();
  probe.remove();
  return width;
});
"""


def measure(driver: Any, scroll: int = 0) -> dict[str, Any]:
    """The lanes' box after scrolling it by ``scroll`` pixels (to an end: a large one)."""
    driver.execute_script(
        "document.querySelector('figure.tl-figure').scrollBy(arguments[0], 0)", scroll
    )
    return driver.execute_script(MEASURE)


def names_in_view(seen: dict[str, Any]) -> None:
    """Each lane's name lies inside the box's visible part, and nothing is drawn over it."""
    left, top, right, bottom = seen["box"]
    assert len(seen["names"]) == 6
    for name, (x0, y0, x1, y1), on_top in seen["names"]:
        assert left - 0.5 <= x0 and x1 <= right + 0.5 and top <= y0 and y1 <= bottom, name
        assert on_top, f"{name} is covered"


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_the_timeline_opens_at_its_recent_end_keeps_the_names_in_view_and_labels_apart(
    browser, live_server
):
    """Issue 28 item 8 (R19), at 1400 px with the admin's sidebar open: the lanes are wider
    than their box. It opens at the window's end, where the fires are; scrolled to either
    end, every lane's name is still in view; the labels of boots a minute apart never
    overlap."""
    from django.contrib.auth.models import User

    from durablebeat.core import clock
    from durablebeat.ops.timeline import text_width

    User.objects.create_superuser("admin", "admin@example.com", "pw")
    prepare(clock.now())
    b = browser
    log_in(b, live_server.url, "admin", "pw")
    b.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    b.get(f"{live_server.url}/admin/durablebeat/schedule/timeline/")
    b.execute_script(
        "arguments[0].scrollIntoView({block: 'center'})", wait_for(b, "figure.tl-figure")
    )
    shot(b, "timeline-narrow", keep=True)

    at_load = measure(b)
    assert at_load["overflow"] > 100  # the box scrolls: the checks below check something
    assert at_load["canvas"][2] == pytest.approx(at_load["box"][2], abs=1)  # the recent end
    names_in_view(at_load)
    oldest = measure(b, -100_000)
    assert oldest["canvas"][0] == pytest.approx(oldest["box"][0], abs=1)
    names_in_view(oldest)
    recent = measure(b, 100_000)
    assert recent["canvas"][2] == pytest.approx(recent["box"][2], abs=1)
    names_in_view(recent)

    labels = at_load["labels"]
    assert len(labels) == 8
    for i, (text, box) in enumerate(labels):
        for other, other_box in labels[i + 1 :]:
            assert not overlap(box, other_box), f"{text!r} overlaps {other!r}"
    # The rows are placed on an estimate of each label's width: over every glyph a host
    # name may hold, drawn as a label is, in this browser's font.
    glyphs = [chr(c) for c in range(33, 127)] + ["…"]
    drawn = b.execute_script(PROBE, glyphs)
    wider = [(g, w) for g, w in zip(glyphs, drawn, strict=True) if w > text_width(g, 10)]
    assert not wider, f"glyphs wider than estimated: {wider}"


def test_an_operator_sees_each_problem_on_the_timeline_and_reaches_its_run(browser, live_server):
    from django.contrib.auth.models import User

    from durablebeat.core import clock
    from durablebeat.enums import RunState
    from durablebeat.models import Run

    User.objects.create_superuser("admin", "admin@example.com", "pw")
    seen = prepare(clock.now())
    b = browser
    log_in(b, live_server.url, "admin", "pw")
    # The admin's navigation sidebar closed, as a person does for a wide page.
    b.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    b.refresh()
    b.find_element(By.CSS_SELECTOR, "a.durablebeat-timeline-link").click()  # from the list
    wait_for(b, "svg.tl-lanes")
    assert b.title.startswith("Timeline")

    def mark(kind: str, schedule: str) -> Any:
        found = [
            m
            for m in b.find_elements(By.CSS_SELECTOR, f"a.tl-mark.tl-{kind}")
            if m.get_attribute("aria-label").startswith(f"{schedule}: ")
        ]
        assert found, f"no {kind} mark of {schedule}"
        return found[0]

    assert "Failed" in mark("failed", "sync-crm").get_attribute("aria-label")
    assert "caught up at boot" in mark("catch_up", "morning-digest").get_attribute("aria-label")
    assert "fired by hand" in mark("manual", "sync-crm").get_attribute("aria-label")
    assert "previous run started" in mark("skipped", "export-warehouse").get_attribute("aria-label")
    nightly = [
        m.get_attribute("aria-label")
        for m in b.find_elements(By.CSS_SELECTOR, "a.tl-mark")
        if m.get_attribute("aria-label").startswith("nightly-report: ")
    ]
    assert len(nightly) == 8 and all("startup grace" in n for n in nightly)  # one per deploy
    assert len(b.find_elements(By.CSS_SELECTOR, "a.tl-boot")) == 8
    band = b.find_element(By.CSS_SELECTOR, "rect.tl-stuck")
    assert "stuck since" in band.get_attribute("aria-label")
    starved = b.find_element(
        By.CSS_SELECTOR, f'g.tl-lane-name[data-schedule="{seen["starved"].pk}"] text.tl-note'
    )
    assert "never fired" in starved.text
    shot(b, "timeline", keep=True)

    # The table: the same marks, in words.
    b.find_element(By.CSS_SELECTOR, "a.tl-table-link").click()
    row = wait_for(b, f'tr.tl-row-mark[data-run="{seen["lost"].pk}"]')
    assert "lost (reclaimed)" in row.text and "import-feed" in row.text

    # Fires per deploy: the daily job fired at every boot, flagged.
    b.find_element(By.CSS_SELECTOR, "a.tl-picture-link").click()
    b.find_element(By.CSS_SELECTOR, "a.tl-deploys-link").click()
    flagged = wait_for(b, "ul.tl-overfired").text
    assert "nightly-report fired 8 times" in flagged
    bars = b.find_elements(By.CSS_SELECTOR, "g.tl-deploy")
    assert len(bars) == 9  # eight boots, and the admin's run now (no boot)
    assert "no boot: run now" in bars[-1].text  # issue 39: it said "(admin run now)"
    shot(b, "timeline-deploys", keep=True)

    # The orphaned run's mark leads to that run.
    b.find_element(By.LINK_TEXT, "Show the lanes").click()
    wait_for(b, "svg.tl-lanes")
    mark("lost", "import-feed").click()
    WebDriverWait(b, 10).until(lambda d: f"/run/{seen['lost'].pk}/change/" in d.current_url)
    assert "Lost" in b.find_element(By.ID, "content").text

    # The stuck schedule's page: its lane over 7 days, lateness and durations.
    b.get(f"{live_server.url}/admin/durablebeat/schedule/{seen['stuck'].pk}/change/")
    clicked = clock.now()
    wait_for(b, "#timeline").find_element(By.LINK_TEXT, "last 24h").click()
    WebDriverWait(b, 10).until(
        lambda d: (
            "timeline=24h" in d.current_url
            and d.execute_script("return document.readyState") == "complete"
        )
    )  # the new page, not the one the click left
    detail = wait_for(b, "#timeline")
    points = b.find_elements(By.CSS_SELECTOR, "#timeline svg.tl-chart-duration circle.tl-point")
    # its runs that finished, each with its duration, in the 24 h before the page was drawn
    # (a test started at xx:59 may see the oldest leave the window meanwhile)
    fired = Run.objects.filter(schedule=seen["stuck"]).exclude(state=RunState.SKIPPED)

    def in_the_day_before(at: dt.datetime) -> int:
        return fired.filter(slot__gt=at - dt.timedelta(hours=24)).count()

    assert in_the_day_before(clock.now()) <= len(points) <= in_the_day_before(clicked)
    assert len(points) >= 13
    b.execute_script("arguments[0].scrollIntoView({block: 'start'})", detail)
    shot(b, "timeline-detail", keep=True)

    # The dark theme: the same page, readable.
    b.get(f"{live_server.url}/admin/durablebeat/schedule/timeline/")
    b.execute_script("localStorage.setItem('theme', 'dark')")
    b.refresh()
    wait_for(b, "svg.tl-lanes")
    assert b.execute_script("return document.documentElement.dataset.theme") == "dark"
    shot(b, "timeline-dark", keep=True)

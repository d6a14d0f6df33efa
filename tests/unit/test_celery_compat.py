"""R25, drop-in: every entry of a corpus of ``beat_schedule`` configurations
(tests/compat_corpus.py) fires under durablebeat on the slots Celery's own beat fires it.

Celery's side is Celery's code: a ``celery.beat.PersistentScheduler`` (its shelve file in a
temporary folder) ticked under a frozen clock (time_machine) that moves on by what each tick
asks to sleep, at one-second resolution, as its beat loop would; a fire is recorded when it
calls ``apply_async``. durablebeat's side is what its engine does: the entry read by the code
sync (``parse_entry``), the first next fire and every later one decided by ``policy.decide``
at the instant beat wakes. Compared: the next five fires from each boot (an ordinary day,
both DST changes in the project's zone, a year end), to the second.

The one documented difference, the startup grace of a new interval's first fire (R2), is
set aside by giving each interval the grace Celery waits: its interval (none for a relative
one, whose first rounded slot is Celery's). Solar schedules are compared over a year at
several latitudes, polar ones included, on sampled days.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import time_machine
from celery import Celery
from celery._state import get_current_app
from celery.beat import PersistentScheduler
from celery.schedules import solar

from durablebeat.beat import celery_specs
from durablebeat.beat.codesync import celery_timezone, parse_entry
from durablebeat.core import policy, timing
from durablebeat.enums import Reason
from tests import compat_corpus as corpus

FIRES = 5
#: Celery's beat fires within a second of the slot at this resolution
TOLERANCE = dt.timedelta(seconds=1)


def celery_app(project: corpus.Project) -> Celery:
    app = Celery(f"compat-{project.name}", set_as_current=False)
    app.conf.timezone = project.timezone
    app.conf.result_expires = None  # no celery.backend_cleanup entry: not compared here
    app.conf.beat_schedule = project.beat_schedule
    return app


class RecordingScheduler(PersistentScheduler):
    """Celery's scheduler, its sends recorded instead of published."""

    fired: list[tuple[str, dt.datetime]]

    @property
    def producer(self) -> None:  # type: ignore[override]
        return None

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kw: Any):
        self.fired.append((entry.name, self.app.now().astimezone(dt.UTC)))


@contextlib.contextmanager
def restored(app: Celery) -> Iterator[None]:
    try:
        yield
    finally:
        app.set_current()


def celery_fires(
    project: corpus.Project,
    name: str,
    boot: dt.datetime,
    until: dt.datetime,
    folder: Path,
    max_interval: float = 366 * 86400,
) -> list[dt.datetime]:
    """One entry's first ``FIRES`` fires under Celery's beat booted at ``boot``: its loop
    sleeps what each tick returns (the clock moved by exactly that), fires are recorded."""
    one = corpus.Project(project.name, project.timezone, {name: project.beat_schedule[name]})
    app = celery_app(one)
    fires: list[dt.datetime] = []
    # A PersistentScheduler's entries go through its shelve file, and an unpickled schedule
    # reads the current app's zone: in a beat process, the app is the current one.
    before = get_current_app()
    app.set_current()
    with time_machine.travel(boot, tick=False) as clock, restored(before):
        scheduler = RecordingScheduler(
            app=app, schedule_filename=str(folder / f"{name}-{boot:%s}"), lazy=False
        )
        scheduler.fired = []
        scheduler.max_interval = max_interval
        now = boot
        for _ in range(1_000):
            if now > until or len(fires) >= FIRES:
                break
            sleep = scheduler.tick()
            fires += [at for fired, at in scheduler.fired if fired == name]
            scheduler.fired.clear()
            # a tick that fired nothing and asks for no sleep still lets time pass
            now += dt.timedelta(seconds=max(sleep, 0 if scheduler.fired else 0.001))
            clock.move_to(now)
        scheduler.close()
    return fires[:FIRES]


def durable_fires(
    entry: Any, zone: str, boot: dt.datetime, until: dt.datetime
) -> list[dt.datetime]:
    """The first ``FIRES`` slots durablebeat's engine fires for one code entry."""
    code = parse_entry(entry["name"], entry["value"], zone, check_task=False)
    spec = code.spec
    grace = dt.timedelta(0)
    if isinstance(spec, timing.Interval) and not spec.relative:
        grace = spec.every  # R2's grace set to what Celery waits (the documented difference)
    nxt: dt.datetime | None = None
    last_run = boot
    fires: list[dt.datetime] = []
    now = boot
    with time_machine.travel(boot, tick=False) as clock:  # a custom object reads its clock
        for _ in range(10_000):
            due = policy.Due(
                id=1,
                name=code.name,
                spec=spec,
                next_fire_at=nxt,
                next_fire_reason=Reason.SCHEDULED,
                startup_grace=grace,
                catch_up=False,
                catch_up_window=dt.timedelta(hours=1),
                last_run_at=last_run,
            )
            action = policy.decide(due, now, dt.timedelta(seconds=10), caught_up=False)
            if isinstance(action, policy.Fire):
                fires.append(action.slot)
                last_run = now
            assert not isinstance(action, policy.Miss), action
            nxt = action.next_fire_at
            if nxt is None or len(fires) >= FIRES or nxt > until:
                break
            now = max(now, nxt)  # beat wakes at the next fire
            clock.move_to(now)
    return fires


def tolerance(fires: list[dt.datetime]) -> dt.timedelta:
    """``TOLERANCE``, or a tenth of the shortest gap between fires when that is less: a
    0.5 s interval one second late is not "the same slots" (R25)."""
    gaps = [b - a for a, b in itertools.pairwise(fires)]
    return min([TOLERANCE, *(gap / 10 for gap in gaps)])


def compare(
    project: corpus.Project, boot: dt.datetime, folder: Path, max_interval: float = 366 * 86400
) -> list[str]:
    until = boot + dt.timedelta(days=400)
    ours_zone = celery_timezone(celery_app(project))
    mismatches = []
    for name, value in project.beat_schedule.items():
        theirs = celery_fires(
            corpus.BUILDERS[project.name](), name, boot, until, folder, max_interval
        )
        ours = durable_fires({"name": name, "value": value}, ours_zone, boot, until)
        if len(ours) != len(theirs) or any(
            abs(a - b) > tolerance(theirs) for a, b in zip(ours, theirs, strict=False)
        ):
            mismatches.append(
                f"{project.name}/{name} from {boot.isoformat()}:\n"
                f"  celery:      {[t.isoformat() for t in theirs]}\n"
                f"  durablebeat: {[t.isoformat() for t in ours]}"
            )
    return mismatches


@pytest.mark.parametrize(
    ("project", "label", "boot"),
    [
        pytest.param(p.name, label, boot, id=f"{p.name}-{label.replace(' ', '-')}")
        for p in corpus.projects()
        if p.name != "solar"
        for label, boot in corpus.starts_for(p)
    ],
)
def test_every_entry_fires_when_celerys_beat_fires_it(project, label, boot, tmp_path):
    mismatches = compare(corpus.BUILDERS[project](), boot, tmp_path)
    assert not mismatches, "\n".join(mismatches)


def test_the_comparison_goes_red_when_a_kind_stops_matching(tmp_path, monkeypatch):
    """The suite can fail: a relative interval rounded one unit late differs from Celery."""
    real = timing.advance

    def late(spec, deadline, now):
        nxt = real(spec, deadline, now)
        if isinstance(spec, timing.Interval) and spec.relative and nxt is not None:
            return nxt + dt.timedelta(hours=1)
        return nxt

    monkeypatch.setattr(timing, "advance", late)
    project = corpus.BUILDERS["london"]()
    mismatches = compare(project, corpus.STARTS["*"][0][1], tmp_path)
    assert any("relative-entry-hour" in m for m in mismatches)


def test_the_comparison_goes_red_when_a_sub_second_interval_fires_off_its_slots(
    tmp_path, monkeypatch
):
    """R25: a 0.5 s interval fires twice a second, as under Celery's beat; one whose slots
    were rounded up to whole seconds (or a beat that slept MIN_SLEEP past them) differs."""
    real = timing.advance

    def whole_seconds(spec, deadline, now):
        nxt = real(spec, deadline, now)
        if isinstance(spec, timing.Interval) and spec.every < dt.timedelta(seconds=1):
            return nxt.replace(microsecond=0) + dt.timedelta(seconds=1)
        return nxt

    monkeypatch.setattr(timing, "advance", whole_seconds)
    project = corpus.BUILDERS["sub-second"]()
    mismatches = compare(project, corpus.STARTS["*"][0][1], tmp_path)
    assert {m.split(" from ")[0] for m in mismatches} == {
        "sub-second/half-second-float",
        "sub-second/timedelta-200ms",
        "sub-second/schedule-250ms",
    }


@pytest.mark.parametrize("max_interval", [5, 300])
def test_celerys_loop_interval_does_not_slow_a_sub_second_interval(tmp_path, max_interval):
    """Celery's beat sleeps ``min(next run, max_interval)`` (5 s for django-celery-beat's
    scheduler, 300 s for its own): a 0.5 s interval still fires twice a second, and so it does
    here whatever ``DURABLEBEAT_MAX_INTERVAL`` is (the engine wakes for each slot)."""
    project = corpus.BUILDERS["sub-second"]()
    assert compare(project, corpus.STARTS["*"][0][1], tmp_path, max_interval) == []


# --- solar over a year ----------------------------------------------------------------------

#: (event, latitude, longitude): temperate, tropical, southern, subarctic, high arctic
SOLAR_PLACES = [
    ("sunrise", 51.5074, -0.1278),  # London
    ("sunset", -33.8688, 151.2093),  # Sydney
    ("solar_noon", 22.5726, 88.3639),  # Kolkata
    ("dawn_nautical", -54.8019, -68.3030),  # Ushuaia
    ("sunset", 69.6492, 18.9553),  # Tromsø: polar night from late November
    ("dusk_civil", 69.6492, 18.9553),
    ("sunrise", 78.2232, 15.6267),  # Longyearbyen: polar night and midnight sun
    ("dawn_astronomical", 78.2232, 15.6267),  # no astronomical dawn for months
]
#: sampled boots over 2026, one every 19 days (every month, both solstices' weeks)
SOLAR_BOOTS = [corpus.utc(2026, 1, 1, 7, 3) + dt.timedelta(days=19 * k) for k in range(20)]


def celery_solar_fires(event: str, lat: float, lon: float, boot: dt.datetime) -> list[dt.datetime]:
    """Celery's solar schedule asked as its beat asks it, the clock frozen at each step."""
    app = Celery("compat-solar", set_as_current=False)
    sched = solar(event, lat, lon, app=app)
    fires: list[dt.datetime] = []
    last, now = boot, boot
    with time_machine.travel(boot, tick=False) as clock:
        for _ in range(100):
            due, rem = sched.is_due(last)
            if due:
                fires.append(now)
                last = now
                if len(fires) >= FIRES:
                    break
                continue
            now += dt.timedelta(seconds=max(1, math.ceil(rem)))
            clock.move_to(now)
    return fires


def test_the_solar_table_is_celerys():
    """durablebeat keeps its own copy of Celery's event table (importing durablebeat must not
    hang on Celery's private names); this says when Celery's changes."""
    from celery.schedules import solar as celery_solar

    from durablebeat.core import solar as ours

    assert set(ours.EVENTS) == set(celery_solar._all_events)
    assert celery_solar._methods == ours._METHODS
    assert celery_solar._horizons == ours._HORIZONS
    assert celery_solar._use_center_l == ours._USE_CENTER


def test_solar_fires_when_celerys_solar_does_over_a_year_at_several_latitudes():
    mismatches = []
    for event, lat, lon in SOLAR_PLACES:
        spec = timing.Solar(event, lat, lon)
        for boot in SOLAR_BOOTS:
            theirs = celery_solar_fires(event, lat, lon, boot)
            ours: list[dt.datetime] = []
            slot = timing.next_slot(spec, boot)
            while slot is not None and len(ours) < FIRES:
                ours.append(slot)
                slot = timing.advance(spec, slot, slot)
            if len(ours) != len(theirs) or any(
                abs(a - b) > TOLERANCE for a, b in zip(ours, theirs, strict=False)
            ):
                mismatches.append(f"{event} at {lat},{lon} from {boot}: {theirs} vs {ours}")
    assert not mismatches, "\n".join(mismatches)


def test_a_polar_night_has_no_sunrise_and_status_says_until_when():
    """No fire on a day without the event, never a hot loop: the next sunrise at 78°N after
    late November is in February, found in one call."""
    spec = timing.Solar("sunrise", 78.2232, 15.6267)
    after = corpus.utc(2026, 11, 20)
    nxt = timing.next_slot(spec, after)
    assert nxt is not None and dt.datetime(2027, 2, 10, tzinfo=dt.UTC) < nxt < dt.datetime(
        2027, 2, 25, tzinfo=dt.UTC
    )
    from durablebeat.words import no_event_words

    words = no_event_words(spec, after, nxt)
    assert words == f"the sun does not rise at 78.2232°N, 15.6267°E until {nxt:%Y-%m-%d}"
    assert (
        no_event_words(
            spec, corpus.utc(2026, 3, 20), timing.next_slot(spec, corpus.utc(2026, 3, 20))
        )
        is None
    )


def test_a_sun_event_that_never_comes_is_a_bad_row_not_a_search_at_every_tick(monkeypatch):
    """R21: with no event within the polar search bound, the decision refuses the row
    naming the field (beat sets it aside) instead of leaving it with no next fire."""
    from durablebeat.core import solar as solar_math

    monkeypatch.setattr(solar_math, "MAX_SEARCH_DAYS", 3)
    spec = timing.Solar("sunrise", 78.2232, 15.6267)
    due = policy.Due(
        id=1,
        name="polar",
        spec=spec,
        next_fire_at=None,
        next_fire_reason=Reason.SCHEDULED,
        startup_grace=dt.timedelta(0),
        catch_up=False,
        catch_up_window=dt.timedelta(hours=1),
    )
    with pytest.raises(timing.InvalidSchedule) as info:
        policy.decide(due, corpus.utc(2026, 12, 1), dt.timedelta(seconds=10), caught_up=False)
    assert str(info.value) == "solar_event: no sunrise at 78.2232°N, 15.6267°E within 3 days"


def test_a_custom_schedule_is_labelled_by_class_and_repr_without_its_address():
    """The label is stable from boot to boot (a default repr's address is not), so a
    restart does not read as a timing change (R2, R6); a repr that raises still boots."""

    class Plain(corpus.EveryQuarterHourOnWeekdays):
        __repr__ = object.__repr__

    class Broken(corpus.EveryQuarterHourOnWeekdays):
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    plain = celery_specs.from_celery(Plain(), "UTC")
    assert isinstance(plain, timing.Custom)
    assert plain == celery_specs.from_celery(Plain(), "UTC")
    assert " at 0x" not in plain.label and plain.label.endswith("Plain object>")
    broken = celery_specs.from_celery(Broken(), "UTC")
    assert isinstance(broken, timing.Custom) and broken.label.endswith(".Broken>")

"""``manage.py durablebeat check | report | status | import-django-celery-beat | backfill |
prune``.

Thin: parse the arguments, call the library functions (``health``, ``report``,
``importer``, ``backfill``, ``prune``) that the tests call directly, print their words.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import conf, dbclock, words
from ...core import clock
from ...ops import backfill, health, importer, prune, report, status


def _duration(text: str) -> Any:
    try:
        return words.parse_duration(text)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise CommandError(f"--limit: a whole number of 1 or more, not {text!r}")
    return value


def _instant(text: str) -> dt.datetime:
    """ISO 8601; without an offset it is UTC."""
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"not an ISO 8601 date and time: {text!r}") from exc
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = "Operate durablebeat: health check, fire report, status table, import."
    # Django's system checks run in ``handle``: an invalid DURABLEBEAT_* setting (E002) is
    # ``check``'s critical finding (exit 2), not Django's SystemCheckError (exit 1).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # Django adds it only for commands whose checks it runs before ``handle``.
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="subcommand")
        check = sub.add_parser(
            "check",
            help="Exit 0 when all is well, 1 on warnings, 2 on critical findings (R17).",
        )
        check.add_argument("--json", action="store_true", help="Findings as a JSON list.")
        check.add_argument(
            "--only",
            default="",
            help=f"Comma-separated finding codes to report and count, of: "
            f"{', '.join(health.CODES)}. E.g. a beat liveness probe: --only no_beat,overdue "
            "(an unreachable database is still printed, but counts only when asked for).",
        )
        rep = sub.add_parser("report", help="Fires per boot and reason; flags over-firing (R18).")
        rep.add_argument("--since", default="48h", help="Window, e.g. 48h, 2d, 90m (default 48h).")
        rep.add_argument("--json", action="store_true")
        rep.add_argument(
            "--limit",
            type=_positive,
            default=report.DEFAULT_LIMIT,
            help=f"Name the N schedules that fired most (default {report.DEFAULT_LIMIT}).",
        )
        stat = sub.add_parser(
            "status",
            help="Counts by state, the late, stuck, failing and set-aside schedules, then "
            "the schedules by name.",
        )
        stat.add_argument(
            "--all", dest="every", action="store_true", help="Every schedule, streamed."
        )
        stat.add_argument(
            "--name",
            default=None,
            metavar="PATTERN",
            help="The schedules whose name matches PATTERN (* and ?, e.g. 'digest-42*').",
        )
        stat.add_argument(
            "--limit",
            type=_positive,
            default=None,
            help=f"At most N rows of each part (default {status.DEFAULT_LIMIT}; "
            "with --all or --name: no limit).",
        )
        stat.add_argument(
            "--json", action="store_true", help="JSON Lines: an object per line, streamed."
        )
        imp = sub.add_parser(
            "import-django-celery-beat",
            help="Copy django-celery-beat's periodic tasks into durablebeat.",
        )
        imp.add_argument("--dry-run", action="store_true", help="Print the plan, write nothing.")
        back = sub.add_parser(
            "backfill",
            help="Fire each slot of NAME in [--from, --to] that has no run, once (R27).",
        )
        back.add_argument("name", help="The schedule's name.")
        back.add_argument("--from", dest="since", required=True, help="ISO 8601; UTC if no offset.")
        back.add_argument("--to", dest="until", required=True, help="ISO 8601; UTC if no offset.")
        back.add_argument("--dry-run", action="store_true", help="List what would fire.")
        pru = sub.add_parser(
            "prune",
            help="Delete the ledger's rows older than DURABLEBEAT_RETENTION, in batches (R32).",
        )
        pru.add_argument("--dry-run", action="store_true", help="Count what would go.")
        pru.add_argument(
            "--older-than",
            default=None,
            help="Keep more than the retention this time, e.g. 365d (never less).",
        )
        pru.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            help=f"Most rows deleted in one transaction (1 to {prune.MAX_BATCH:,}; default 1000).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        checking = options["subcommand"] == "check"
        if not options.get("skip_checks") and not (checking and conf.invalid_settings()):
            self.check()
        handler = {
            "check": self.check_,
            "report": self.report,
            "status": self.status,
            "import-django-celery-beat": self.import_,
            "backfill": self.backfill,
            "prune": self.prune,
        }[options["subcommand"]]
        dbclock.measure()  # R26: once per call, "now" on the database's clock
        handler(options)

    def check_(self, options: dict[str, Any]) -> None:
        only = [c.strip() for c in options["only"].split(",") if c.strip()] or None
        if only and (unknown := set(only) - set(health.CODES)):
            raise CommandError(f"unknown finding codes: {', '.join(sorted(unknown))}")
        found = health.check(clock.now(), only)
        if options["json"]:
            self.stdout.write(json.dumps([f.as_dict() for f in found], indent=2))
        elif found:
            for f in found:
                self.stdout.write(f.line())
        else:
            self.stdout.write("OK: beat is alive and every schedule is on time")
        code = health.exit_code(found, only)
        if code:
            raise SystemExit(code)

    def report(self, options: dict[str, Any]) -> None:
        now = clock.now()
        since = clock.before(now, _duration(options["since"]))
        built = report.build_report(since, now, limit=options["limit"])
        if options["json"]:
            self.stdout.write(json.dumps(built.as_dict(), indent=2))
        else:
            self.stdout.write(report.format_report(built))

    def status(self, options: dict[str, Any]) -> None:
        kwargs = {"every": options["every"], "name": options["name"], "limit": options["limit"]}
        if not options["every"] and options["name"] is None and kwargs["limit"] is None:
            kwargs["limit"] = status.DEFAULT_LIMIT
        make = status.status_json if options["json"] else status.status_lines
        for line in make(clock.now(), **kwargs):
            self.stdout.write(line)  # each as it is made: --all is never held whole (R33)

    def import_(self, options: dict[str, Any]) -> None:
        try:
            result = importer.run_import(clock.now(), dry_run=options["dry_run"])
        except importer.NotInstalled as exc:
            raise CommandError(str(exc)) from exc
        for line in result.lines():
            self.stdout.write(line)

    def backfill(self, options: dict[str, Any]) -> None:
        since, until = _instant(options["since"]), _instant(options["until"])
        try:
            result = backfill.backfill(
                options["name"], since, until, clock.now(), dry_run=options["dry_run"]
            )
        except backfill.BackfillRefused as exc:
            raise CommandError(str(exc)) from exc
        for line in result.lines():
            self.stdout.write(line)

    def prune(self, options: dict[str, Any]) -> None:
        older = options["older_than"]
        try:
            planned = prune.plan(
                clock.now(),
                _duration(older) if older is not None else None,
                options["batch_size"],
                options["dry_run"],
            )
        except prune.PruneRefused as exc:
            raise CommandError(str(exc)) from exc

        def say(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()  # progress as it goes, also into a pipe or a log

        prune.prune(planned, say)

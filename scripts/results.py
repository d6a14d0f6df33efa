"""The whole suite's results, from the JUnit XML each run of scripts/test.sh leaves in
test-output/runs/: what failed (with the end of that run's log), the 15 slowest tests of
all runs, each run's count and time, and one closing line over every run,
``suite: N passed, N failed, N skipped``. Exits 1 when a test failed or a run collected
none."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 15
LOG_LINES = 400


def main(folder: Path) -> int:
    passed = failed = skipped = 0
    slow: list[tuple[float, str, str]] = []
    bad_runs: list[str] = []
    lines = []
    for xml in sorted(folder.glob("*.xml")):
        run = xml.stem
        cases = ET.parse(xml).getroot().iter("testcase")
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for case in cases:
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            slow.append((float(case.get("time") or 0), run, name))
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        rc_file = folder / f"{run}.rc"
        rc, seconds = rc_file.read_text().split() if rc_file.exists() else ("?", "?")
        lines.append(
            f"  {run:28} {counts['passed']:5} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped in {seconds} s (exit {rc})"
        )
        if counts["failed"] or rc != "0" or not sum(counts.values()):
            bad_runs.append(run)
        passed, failed, skipped = (
            passed + counts["passed"],
            failed + counts["failed"],
            skipped + counts["skipped"],
        )
    for run in bad_runs:
        log = (folder / f"{run}.log").read_text(errors="replace").splitlines()
        print(f"=== {run} failed: the last {min(len(log), LOG_LINES)} lines of its log")
        print("\n".join(log[-LOG_LINES:]))
    print(f"=== the {SLOWEST} slowest tests of every run")
    for seconds, run, name in sorted(slow, reverse=True)[:SLOWEST]:
        print(f"  {seconds:7.1f} s  {run:24} {name}")
    print("=== each run")
    print("\n".join(lines))
    print(f"suite: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if bad_runs or not passed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

"""Safe defaults (R21): the demo project's DEBUG is off unless asked for, and the
demo command asks for it. Read in a fresh interpreter: settings are read once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def debug_with(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_DEBUG"}
    if env_value is not None:
        env["DJANGO_DEBUG"] = env_value
    code = "import project.settings as s; print(s.DEBUG)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.parametrize(("value", "debug"), [(None, "False"), ("0", "False"), ("1", "True")])
def test_debug_is_off_unless_django_debug_is_1(value, debug):
    assert debug_with(value) == debug


def test_the_demo_command_turns_debug_on_for_itself():
    script = (ROOT / "scripts" / "demo.sh").read_text().splitlines()
    assert "export DJANGO_DEBUG=1" in script

"""Headless Chromium for the admin's browser tests, and where their screenshots go.

Needs Debian's ``chromium`` and ``chromium-driver`` and Selenium (``scripts/system-tools.sh``
installs them): a test module that imports this is skipped without them, and fails under CI,
where a skip would hide a broken install.

Screenshots go to ``test-output/screenshots/`` (kept out of git). The README's pictures are
the ones a test marks ``keep``: with ``DURABLEBEAT_UPDATE_SCREENSHOTS=1`` they are written
to ``tests/e2e/screenshots/`` too, beside the test that takes them, to be committed; a
plain test run leaves the tree clean.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output" / "screenshots"
KEPT = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = "Chromium, chromedriver or Selenium is missing (scripts/system-tools.sh installs them)"

try:
    from selenium import webdriver
except ImportError:
    webdriver = None
if CHROMIUM is None or CHROMEDRIVER is None or webdriver is None:
    if os.environ.get("CI"):
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING, allow_module_level=True)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@contextlib.contextmanager
def chromium(width: int, height: int) -> Iterator[Any]:
    """A headless Chromium with a window of ``width`` x ``height``, quit at the end."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str, *, keep: bool = False) -> Path:
    """A screenshot of the page as ``name``.png; ``keep``: one of the pictures of
    docs/operations.md."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    driver.save_screenshot(str(path))
    if keep and os.environ.get("DURABLEBEAT_UPDATE_SCREENSHOTS") == "1":
        KEPT.mkdir(exist_ok=True)
        shutil.copyfile(path, KEPT / path.name)
    return path


def fill(driver: Any, name: str, value: str) -> None:
    box = driver.find_element(By.NAME, name)
    box.clear()
    box.send_keys(value)


def log_in(driver: Any, base_url: str, username: str, password: str) -> None:
    """Log in through the admin's form and wait until the schedule list has loaded (a click
    returns before the next page does)."""
    driver.get(f"{base_url}/admin/login/?next=/admin/durablebeat/schedule/")
    fill(driver, "username", username)
    fill(driver, "password", password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: "Select schedule to change" in d.title)

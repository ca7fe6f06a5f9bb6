"""Headless Chromium for the dashboard's tests: Debian's ``chromium`` and ``chromium-driver``
(``make test`` installs them when missing), driven through Selenium, with a fresh profile and
nothing that reaches off the machine (no sync, no component updates, no QUIC)."""

from __future__ import annotations

import base64
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 90
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def _binary(path: str, name: str) -> str:
    found = path if Path(path).exists() else shutil.which(name)
    assert found, f"{name} is missing: apt-get install -y chromium chromium-driver (make test does)"
    return found


@contextlib.contextmanager
def chromium(profile: Path, width: int = 1280, height: int = 900) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary(CHROMIUM, "chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    # An explicit driver path: Selenium Manager would otherwise try to download one.
    service = Service(executable_path=_binary(CHROMEDRIVER, "chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: webdriver.Chrome, condition, what: str, timeout: float = WAIT_S):
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition, message=what)


def screenshot(driver: webdriver.Chrome, path: Path, width: int, height: int = 600) -> Path:
    """The whole page laid out ``width`` CSS pixels wide (a phone's, below 600: touch and
    mobile viewport too), as PNG; the window is as it was afterwards."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        full = driver.execute_script("return document.documentElement.scrollHeight")
        metrics["height"] = max(int(full), height)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path

"""Debian's Chromium, headless, driven through its chromedriver by Selenium, for the UI tests.

ops/test installs both packages (`chromium`, `chromium-driver`) when they are missing. Chromium is
started with the flags this machine needs: no sandbox (root), no GPU, and none of its own network
traffic (background networking, component updates, sync, QUIC), which a closed network refuses.
Every browser gets a fresh profile directory; every screenshot goes to the test's own directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1500,1100",
)
T = TypeVar("T")


@contextmanager
def chromium(profile: Path, driver_log: Path) -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile in ``profile``."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    service = Service(executable_path=CHROMEDRIVER, log_output=str(driver_log))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """One browser on the UI: waits that say what they waited for, and numbered screenshots."""

    def __init__(self, driver: WebDriver, base_url: str, shots: Path) -> None:
        self.driver, self.base_url, self.shots = driver, base_url, shots
        self.taken: list[Path] = []
        shots.mkdir(parents=True, exist_ok=True)

    def open(self, route: str) -> None:
        self.driver.get(f"{self.base_url}/#{route}")

    def wait(self, condition: Callable[[WebDriver], T | None], what: str, timeout: float = 30.0) -> T:
        def check(driver: WebDriver) -> T | None:
            try:
                return condition(driver)
            except (StaleElementReferenceException, WebDriverException):
                return None  # the page redrew under us: ask again

        try:
            found = WebDriverWait(self.driver, timeout, poll_frequency=0.2).until(check)
            assert found is not None, "until() returns only what check gave that is truthy"
            return found
        except Exception as exc:  # a timeout: say what was awaited, with the page's text and a screenshot
            self.screenshot(f"failed-{re.sub(r'[^a-z0-9]+', '-', what.lower())[:40]}")
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; page text:\n{self.text()}") from exc

    def text(self, css: str = "body") -> str:
        return str(self.driver.find_element("css selector", css).text)

    def wait_text(self, css: str, wanted: str, timeout: float = 30.0) -> str:
        def shown(driver: WebDriver) -> str | None:
            text = self.text(css)
            return text if wanted in text else None

        return self.wait(shown, f"{wanted!r} in {css}", timeout)

    def click(self, css: str) -> None:
        """Found and clicked in one step, again if the page redrew between the two (a list refreshes
        itself: the element found may be replaced before the click; seen in CI)."""

        def clicked(driver: WebDriver) -> bool:
            driver.find_element("css selector", css).click()
            return True

        self.wait(clicked, f"{css} to click")

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{len(self.taken) + 1:02d}-{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot {path}"
        assert path.stat().st_size > 1_000, f"screenshot {path} is empty"
        self.taken.append(path)
        return path

"""A headless Chromium for the web page's tests (Selenium), driven from async tests.

Selenium blocks; each call runs in a thread, so the app, the worker and the test share the
event loop without stalling it. The browser is the system's (Debian ``chromium`` and
``chromium-driver``). Without one, tests skip with the reason, unless
``KEEL_REQUIRE_BROWSER=1`` (CI sets it), where a missing browser is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

REQUIRE_ENV = "KEEL_REQUIRE_BROWSER"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# A phone's width: the page must work there.
WINDOW = (430, 1400)


def _missing(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver; skips (or fails, see above) when there is none."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install selenium; it is in the dev extras)")
    binary = next((p for name in BROWSERS if (p := shutil.which(name))), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _missing("no headless browser: install Debian's chromium and chromium-driver")
    assert binary is not None and driver_path is not None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser, with async methods that run Selenium in a thread."""

    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def open(self, path: str) -> None:
        await self.call(self.driver.get, self.base_url + path)

    async def wait(self, check: Callable[[Any], T | None], what: str, timeout_s: float = 40.0) -> T:
        """Poll ``check(driver)`` until it returns something truthy."""

        def poll() -> T:
            from selenium.common.exceptions import WebDriverException

            deadline = time.monotonic() + timeout_s
            last: Exception | None = None
            while time.monotonic() < deadline:
                try:
                    value = check(self.driver)
                    if value:
                        return value
                except WebDriverException as err:  # an element replaced under us: try again
                    last = err
                time.sleep(0.1)
            body = self.driver.find_element("css selector", "body").text
            raise AssertionError(f"timed out waiting for {what} ({last}); page:\n{body}")

        return await self.call(poll)

    # The page replaces its parts as it updates (live updates): an element found a moment
    # ago may be gone. Every action finds its element afresh and tries again when it went
    # stale, instead of failing (StaleElementReferenceException on a loaded machine).

    async def text(self, css: str) -> str:
        def check(driver: Any) -> tuple[str] | None:
            found = driver.find_elements("css selector", css)
            return (found[0].text,) if found else None

        (text,) = await self.wait(check, f"an element {css}")
        return text

    async def wait_text(self, css: str, expected: str, timeout_s: float = 40.0) -> str:
        def check(driver: Any) -> str | None:
            found = driver.find_elements("css selector", css)
            texts = " ".join(e.text for e in found)
            return texts if expected in texts else None

        return await self.wait(check, f"{expected!r} in {css}", timeout_s)

    async def fill(self, css: str, value: str) -> None:
        def run(driver: Any) -> bool:
            element = driver.find_element("css selector", css)
            element.clear()
            element.send_keys(value)
            return element.get_attribute("value") == value

        await self.wait(run, f"{css} filled")

    async def click(self, css: str) -> None:
        def run(driver: Any) -> bool:
            driver.find_element("css selector", css).click()
            return True

        await self.wait(run, f"a click on {css}")

    async def script(self, source: str) -> Any:
        return await self.call(self.driver.execute_script, source)

    async def screenshot(self, path: str) -> None:
        await self.call(self.driver.save_screenshot, path)

"""Headless Chromium for the browser tests: Debian's `chromium` on the command line (DOM dump, screenshot) and, for pages that need clicks, Selenium
driving Debian's `chromium-driver`. Every page of the results site records its own health in <body>: data-js-errors (uncaught errors,
console.error calls, failed resource loads), data-images-total and data-images-loaded."""

import re, shutil, socket, subprocess
from contextlib import contextmanager
from pathlib import Path
import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("headless Chromium is needed for the site test: apt-get install chromium (make test does it)")
    return exe


def browse(url: str, tmp: Path, screenshot: Path | None = None, window: str = "1200,2000") -> str:
    "The DOM of `url` after its scripts ran (and a screenshot of it, if asked), from a fresh profile."
    flags = [
        chromium(),
        *FLAGS,
        f"--user-data-dir={tmp / 'profile'}",
        "--virtual-time-budget=5000",
        f"--window-size={window}",
    ]
    if screenshot:
        subprocess.run(flags + [f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
    return subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout


def body_health(dom: str) -> dict:
    "The health a page wrote into its <body>: images total/loaded, JavaScript error count and text."
    body = re.search(r"<body[^>]*>", dom)
    assert body, "no <body> in the dumped DOM (the page did not load)"
    attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', body.group(0)))
    assert "js-errors" in attrs, f"the page's load check did not run: {body.group(0)[:300]}"
    return {
        "images_total": int(attrs.get("images-total", -1)),
        "images_loaded": int(attrs.get("images-loaded", -1)),
        "js_errors": int(attrs["js-errors"]),
        "js_error_text": attrs.get("js-error-text", ""),
    }


def assert_healthy(dom: str, min_images: int = 0) -> dict:
    "No JavaScript error, no broken image, at least `min_images` images."
    h = body_health(dom)
    assert h["js_errors"] == 0, h["js_error_text"]
    assert h["images_total"] >= min_images and h["images_loaded"] == h["images_total"], h
    return h


def free_port() -> int:
    "A free TCP port on 127.0.0.1 for a server a test starts."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chrome(tmp: Path, window: tuple[int, int] = (1200, 1600)):
    "A Selenium Chrome driver on Debian's chromedriver (no driver download), fresh profile, the browser's console log readable; quit it after."
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is needed for the browser tests: pip install selenium (it is in the dev requirements)")
    driver_exe = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not Path(driver_exe).exists():
        pytest.fail("chromedriver is needed for the browser tests: apt-get install chromium-driver (make test does it)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium()
    for f in FLAGS:
        opts.add_argument(f.replace("--headless", "--headless=new"))
    opts.add_argument(f"--user-data-dir={tmp / 'selenium-profile'}")
    opts.add_argument(f"--window-size={window[0]},{window[1]}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_exe), options=opts)


@contextmanager
def webdriver_session(tmp: Path, window: tuple[int, int] = (1200, 1600)):
    "`chrome` as a context manager."
    d = chrome(tmp, window)
    try:
        yield d
    finally:
        d.quit()


def console_errors(driver) -> list[str]:
    "SEVERE entries of the browser console since the last call."
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]

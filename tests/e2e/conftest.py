"""Browser tests: Playwright's sync API driving Debian's Chromium against the live stack."""

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by the
# fixtures here are still sync and on their own connection.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(autouse=True)
def _demo_logins_allowed(settings):
    # pytest-django runs with DEBUG off, where seed_demo refuses the documented password.
    settings.DEBUG = True


@pytest.fixture(autouse=True)
def _fast_password_hashing():
    # The live server checks passwords with the real hashers, so the demo logins must be
    # hashed with them too (the suite-wide fixture switches to MD5).
    return None

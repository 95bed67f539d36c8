"""The browser tier's fixtures: one stack as ``make dev`` starts it and one headless Chromium for the whole tier (each
module keeps to a DM of its own: test_workspace's is Riley's, test_workspace_agent's Sam's), each test opening its
own pages, one browser context per person; and Playwright's patience."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from infra import browser as chromium
from infra.stack import LOCAL, LOCAL_OPERATORS, Stack
from shared import config
from tests.conftest import FAILED, TEST_DIR

SCREENSHOTS = LOCAL / "screenshots"

OpenPage = Callable[[str], Page]


@pytest.fixture(scope="package")
def web_stack() -> Iterator[Stack]:
    """A stack as `make dev` starts it; the product settings the session's test stack put in os.environ (small
    budgets, tool tiers) are kept out of it, as they are out of a newcomer's shell."""
    with pytest.MonkeyPatch.context() as patch:
        for var in config.VARIABLES:
            patch.delenv(var.name, raising=False)
        stack = Stack(demo_model=True, extra_env=LOCAL_OPERATORS, stack_file=TEST_DIR / "web" / "stack.json").start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module", autouse=True)
def patient_expectations() -> Iterator[None]:
    """Every expectation waits as long as a message through the product's real path can take on a loaded machine
    (Playwright's default of 5 s failed in CI beside other test runs)."""
    expect.set_options(timeout=60_000)  # a busy machine: the condition, not the clock
    yield
    expect.set_options(timeout=5_000)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the tier, closed when the tier ends: Playwright's sync API keeps an event loop running on
    this thread while it is open, and the stack tier's MCP timings run their own (asyncio refuses a second)."""
    if chromium.chromium() is None:
        pytest.fail(chromium.MISSING)
    with chromium.launched() as launched:
        yield launched


@pytest.fixture
def open_page(web_stack: Stack, browser: Browser, request: pytest.FixtureRequest) -> Iterator[OpenPage]:
    """Open the workspace as a person, in a browser context of their own."""
    pages: list[tuple[str, Page]] = []

    def open_as(user: str) -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{web_stack.url('fake_slack')}/?user={user}")
        page.wait_for_selector("body[data-version]")
        pages.append((user, page))
        return page

    yield open_as
    if request.node.stash.get(FAILED, False):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for number, (user, page) in enumerate(pages, start=1):
            page.screenshot(path=str(SCREENSHOTS / f"{request.node.name}-{number}-{user}.png"))
    for _, page in pages:
        page.context.close()

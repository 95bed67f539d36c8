"""``make screenshot``: the README's pictures of the workspace and of its console, taken from a real demo run.

It starts a stack as ``make dev`` does (the demo model; its own stack file, so a running ``make dev`` is left
alone), asks the bot a question from the page, waits for the question with its buttons, and saves the page. Then
it answers the question, asks for a restart (an approval waits), opens the Console tab on the answered
conversation and saves that too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from playwright.sync_api import Page

from infra import browser
from infra.procs import StackError
from infra.stack import CHAT_USER, LOCAL, LOCAL_OPERATORS, ROOT, running

IMAGE = ROOT / "docs" / "workspace.png"
CONSOLE_IMAGE = ROOT / "docs" / "console.png"
REQUEST = "which *database* should the billing service use? :thinking_face:"
APPROVAL_REQUEST = "restart billing in staging"
WAIT_MS = 60_000


def mention(page: Page, text: str) -> None:
    """Type a message that mentions the bot, as a person does (the autocomplete picks it)."""
    page.click("#text")
    page.keyboard.type("@age")
    page.wait_for_selector("#autocomplete li.selected")
    page.keyboard.press("Enter")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def take(url: str, out: Path, console_out: Path) -> None:
    with browser.launched() as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 720}, device_scale_factor=1)
        page.goto(f"{url}/?user={CHAT_USER}")
        page.wait_for_selector("body[data-version]")
        mention(page, REQUEST)
        page.locator("#messages .replies-link").first.click(timeout=WAIT_MS)
        page.locator("#thread .block-button").first.wait_for(timeout=WAIT_MS)
        page.locator("#thread .message .reaction").first.wait_for(timeout=WAIT_MS)
        page.mouse.move(600, 400)  # off the messages: no hover toolbar in the picture
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))

        page.locator("#thread .block-button").first.click()  # answered: the conversation goes on and ends
        page.locator("#thread .message", has_text="the operator answered").wait_for(timeout=WAIT_MS)
        page.click("#close-thread")
        mention(page, APPROVAL_REQUEST)  # its approval waits: the console says for whom
        page.click("#views a[data-view='console']")
        answered = page.locator("#sessions tr.conversation", has_text="billing service use")
        answered.locator(".status", has_text="done").wait_for(timeout=WAIT_MS)
        page.locator("#sessions tr.conversation", has_text="waiting for an approval").wait_for(timeout=WAIT_MS)
        answered.click()
        page.locator("#timeline .audit[data-type='answer']").first.wait_for(timeout=WAIT_MS)
        page.mouse.move(1200, 700)
        page.screenshot(path=str(console_out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGE)
    parser.add_argument("--console-out", type=Path, default=CONSOLE_IMAGE)
    args = parser.parse_args(argv)
    if browser.chromium() is None:
        print(browser.MISSING, file=sys.stderr)
        return 2
    try:
        stack_file = LOCAL / "screenshot" / "stack.json"
        with running(demo_model=True, extra_env=LOCAL_OPERATORS, stack_file=stack_file) as stack:
            take(stack.url("fake_slack"), args.out, args.console_out)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} and {args.console_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

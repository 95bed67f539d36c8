"""``make screenshot``: a picture of the workspace for the README, taken from a real run of the demo.

It starts a stack as ``make dev`` does (the demo model; its own stack file, so a running ``make dev`` is left
alone), asks the bot a question from the page, waits for the question with its buttons, and saves the page.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from infra import browser
from infra.procs import StackError
from infra.stack import CHAT_USER, LOCAL, LOCAL_OPERATORS, ROOT, running

IMAGE = ROOT / "docs" / "workspace.png"
REQUEST = "which *database* should the billing service use? :thinking_face:"
WAIT_MS = 60_000


def take(url: str, out: Path) -> None:
    with browser.launched() as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 720}, device_scale_factor=1)
        page.goto(f"{url}/?user={CHAT_USER}")
        page.wait_for_selector("body[data-version]")
        page.click("#text")
        page.keyboard.type("@age")
        page.wait_for_selector("#autocomplete li.selected")
        page.keyboard.press("Enter")
        page.keyboard.type(REQUEST)
        page.keyboard.press("Enter")
        page.locator("#messages .replies-link").first.click(timeout=WAIT_MS)
        page.locator("#thread .block-button").first.wait_for(timeout=WAIT_MS)
        page.locator("#thread .message .reaction").first.wait_for(timeout=WAIT_MS)
        page.mouse.move(600, 400)  # off the messages: no hover toolbar in the picture
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGE)
    args = parser.parse_args(argv)
    if browser.chromium() is None:
        print(browser.MISSING, file=sys.stderr)
        return 2
    try:
        stack_file = LOCAL / "screenshot" / "stack.json"
        with running(demo_model=True, extra_env=LOCAL_OPERATORS, stack_file=stack_file) as stack:
            take(stack.url("fake_slack"), args.out)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

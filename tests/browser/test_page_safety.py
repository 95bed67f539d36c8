"""Untrusted text the page renders (message text, blocks, reaction names, what the console reads from the store)
never becomes markup of its own: no event handler attribute, no CSS of its choosing, no JavaScript object's
property shown as an emoji. The page's own functions, in Chromium, on a blank page: no stack needed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from ops.page import WEB

HOSTILE = 'x" onmouseover="window.pwned=1" y="'


@pytest.fixture(scope="module")
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    blank = context.new_page()
    blank.set_content('<div id="out"></div>')
    blank.add_script_tag(path=str(WEB / "mrkdwn.js"))
    blank.add_script_tag(content="const ui = {}; const $ = (id) => document.getElementById(id);")
    blank.add_script_tag(path=str(WEB / "console.js"))
    yield blank
    context.close()


def rendered(page: Page, function: str, value: Any) -> dict[str, Any]:
    """What ``function(value)`` puts into the page: every attribute of every element, and its text."""
    found: dict[str, Any] = page.evaluate(
        f"""(value) => {{
            const out = document.getElementById("out");
            out.innerHTML = ({function})(value);
            for (const el of out.querySelectorAll("*")) el.dispatchEvent(new MouseEvent("mouseover"));
            const attributes = [...out.querySelectorAll("*")]
                .flatMap((el) => [...el.attributes].map((a) => [a.name, a.value]));
            return {{attributes, text: out.textContent, pwned: window.pwned === 1}};
        }}""",
        value,
    )
    return found


def handlers(found: dict[str, Any]) -> list[list[str]]:
    return [a for a in found["attributes"] if a[0].startswith("on")]


def actions(style: str) -> list[dict[str, Any]]:
    button = {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "action_id": "a", "style": style}
    return [{"type": "actions", "elements": [button]}]


def test_a_buttons_style_is_one_of_slacks_two_or_none(page: Page) -> None:
    blocks = actions(HOSTILE)
    found = rendered(page, "(blocks) => messageBody({text: 'x', blocks}, (id) => id)", blocks)
    assert (handlers(found), found["pwned"]) == ([], False)
    assert ["class", "block-button"] in found["attributes"]
    danger = rendered(page, "(blocks) => messageBody({text: 'x', blocks}, (id) => id)", actions("danger"))
    assert ["class", "block-button danger"] in danger["attributes"]


@pytest.mark.parametrize(
    ("color", "shown"),
    [("red;background-image:url(https://evil.example/)", "#ddd"), ('"><b>x', "#ddd"), ("good", "#2eb886"),
     ("#36a64f", "#36a64f"), ("36a64f", "#36a64f"), (None, "#ddd")],
)  # fmt: skip
def test_an_attachments_colour_is_a_colour_and_nothing_else(page: Page, color: str | None, shown: str) -> None:
    found = rendered(
        page, "(a) => messageBody({text: 'x', attachments: [a]}, (id) => id)", {"color": color, "text": "t"}
    )
    styles = [value for name, value in found["attributes"] if name == "style"]
    assert styles == [f"border-color:{shown}"]


def test_emoji_names_that_are_objects_properties_stay_text(page: Page) -> None:
    text = ":constructor: :__proto__: :toString: :hasOwnProperty: :rocket:"
    for function in ("(t) => mrkdwn(t, (id) => id)", "(t) => markdown(t)"):
        assert rendered(page, function, text)["text"] == ":constructor: :__proto__: :toString: :hasOwnProperty: 🚀"


def test_a_reactions_name_is_text(page: Page) -> None:
    found = rendered(page, "(name) => `<button>${emoji(name)}</button>`", '<img src=x onerror="window.pwned=1">')
    assert found["text"] == ':<img src=x onerror="window.pwned=1">:'
    assert [name for name, _ in found["attributes"]] == []
    assert rendered(page, "(name) => emoji(name)", "rocket")["text"] == "🚀"


def test_the_consoles_token_counts_are_numbers_whatever_the_store_holds(page: Page) -> None:
    found = rendered(page, "(t) => tokens(t)", {"prompt": HOSTILE, "output": 5, "cached": "<b>1</b>"})
    assert (handlers(found), found["pwned"]) == ([], False)
    assert found["text"] == "5"
    assert found["attributes"] == [["title", "prompt 0, cached 0, output 5, thinking 0"]]

"""The local workspace page knows every emoji the product writes (issue 26.2): an unknown shortcode stays as text
there, and one inside _italics_ breaks them (``_:raising_hand: waiting for the parent's answer_``)."""

from __future__ import annotations

import re
from pathlib import Path

from shared.slack.surface import Reaction

ROOT = Path(__file__).resolve().parents[2]
PAGE_EMOJI = ROOT / "ops" / "web" / "mrkdwn.js"
# A shortcode as the product writes one: after a quote, a space or an underscore, and before one (or the end).
SHORTCODE = re.compile(r"""(?:^|(?<=[\s"'`_]))(:[a-z][a-z0-9_+-]*:)(?=[\s"'`_.,]|$)""", re.MULTILINE)
PRODUCT = ("shared", "functions", "infra/fakes/gemini")  # the product, and the demo model people read in the workspace


def product_emoji() -> set[str]:
    found = {f":{reaction.value}:" for reaction in Reaction}
    for folder in PRODUCT:
        for source in (ROOT / folder).rglob("*.py"):
            found.update(SHORTCODE.findall(source.read_text(encoding="utf-8")))
    return {code.strip(":") for code in found}


def page_emoji() -> set[str]:
    table = PAGE_EMOJI.read_text(encoding="utf-8").split("const EMOJI = {", 1)[1].split("};", 1)[0]
    return {quoted or bare for quoted, bare in re.findall(r'(?:"([^"]+)"|([a-z0-9_]+)):\s*"', table)}


def test_the_scan_finds_the_products_emoji() -> None:
    assert {"raising_hand", "white_check_mark", "busts_in_silhouette", "octagonal_sign", "eyes"} <= product_emoji()
    assert "ec2" not in product_emoji()  # an IPv6 address is not an emoji


def test_the_page_knows_every_emoji_the_product_uses() -> None:
    assert product_emoji() - page_emoji() == set()

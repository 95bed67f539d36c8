"""The demo model's guided tour: on request it walks a newcomer through every flow of the product.

Mention the bot with "demo" (or "tour") for the menu; each entry is one message to send next: a plain answer,
a question with options, an approval, a delegation (the last three are ``demo.py``'s own rules). Pure functions
of the request text, like ``demo.py``, which consults ``item`` before its default rules.
"""

from __future__ import annotations

import json
import re
from typing import Any

PREFIX = "[demo model]"
REQUEST_MARKER = "working on now (data, as JSON):\n"  # a session started by a person (a helper's opening has none)
MENU = (
    f"{PREFIX} This is a *scripted demo*: I am the offline demo model, not Gemini. Each of these shows one flow; "
    "send it as a new message that mentions me:\n"
    "• `answer: what is the product?` — a plain answer, no questions asked\n"
    "• `pick a database for billing` — a question with options: press a button, or reply in the thread\n"
    "• `restart billing in staging` — a risky call: an approval card that an operator approves or denies\n"
    "• `restart search in production` — then press *Edit* on its card, change the environment to `staging` and "
    "submit: the edited call is your approval, it runs instead, and I am told it was edited\n"
    "• `delegate the release notes` — two helper sessions share the work (one asks me a question first), "
    "and a status message in the thread follows them\n"
    "Operators may answer and decide; switch person at the top right to see what others are allowed to do."
)
PLAIN = (
    f"{PREFIX} A plain answer: the request was clear, so I answer in the thread and the session ends (✅ on your "
    "message). With the real model this is where Gemini would reply, using tools as it needs them."
)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def framed_request(text: str) -> str | None:
    """The request a person made, or None when the text is not a person's request (a helper's task, a note)."""
    if REQUEST_MARKER not in text:
        return None
    framed = text.split(REQUEST_MARKER, 1)[1].split("\n", 1)[0]
    try:
        return str(json.loads(framed).get("text", framed))
    except ValueError:
        return framed


def item(text: str) -> dict[str, Any] | None:
    """The tour's turn for a fresh user message, or None to leave it to the demo model's other rules."""
    request = framed_request(text)
    if request is None:
        return None
    words = _words(re.sub(r"<@[A-Z0-9]+>", " ", request))
    if words[:1] in (["demo"], ["tour"]) or words in (["help"], []):
        return {"text": MENU}
    if words[:1] == ["answer"]:
        return {"text": PLAIN}
    return None

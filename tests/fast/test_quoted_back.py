"""Untrusted text the product shows itself (not the model's own answer) forms no live mention: a person's reply
quoted back on the answered question or the denied card, an MCP server's option labels and field names. Slack's
broadcast and group tokens are quieted on every post (``shared.slack.safety``); a user mention ``<@U…>`` is left
alone there (the model and the product may mention a person), so text the product quotes must not carry one live.
"""

from __future__ import annotations

import re
from typing import Any

from mcp import types as mcp_types

from shared.agent.tools.mcp import inputs
from shared.slack import blocks
from shared.slack.safety import neutralise

HOSTILE = "<@U0BOSS> <!here> <!subteam^S0ALL|@everyone> <#C0SECRET> <https://evil.example|ok>"
_LIVE = re.compile(r"<[@!#][^<>]*>|<https?:[^<>]*>")


def live(text: str) -> list[str]:
    """The Slack tokens (mentions, broadcasts, channel links, links) still live in ``text`` as posted."""
    return _LIVE.findall(neutralise(text))


def test_a_reply_quoted_back_on_its_answered_question_mentions_nobody() -> None:
    shown = blocks.answered_text("U0OPERATOR", f"sqlite, ask {HOSTILE}", "sqlite or postgres?", pressed=False)
    assert live(shown) == ["<@U0OPERATOR>"], shown  # the product's own mention of who answered
    assert "&lt;@U0BOSS&gt;" in shown  # shown as written


def test_a_reply_quoted_back_keeps_what_slack_encoded_as_it_was() -> None:
    """Slack sends a typed "<" as ``&lt;`` and "&" as ``&amp;``: shown as the person wrote them, not re-encoded."""
    shown = blocks.answered_text("U0OPERATOR", "a &lt; b &amp; c", "which?", pressed=False)
    assert "a &lt; b &amp; c" in shown


def test_a_pressed_option_from_an_mcp_server_mentions_nobody() -> None:
    shown = blocks.answered_text("U0OPERATOR", HOSTILE, "which one?", pressed=True)
    assert live(shown) == ["<@U0OPERATOR>"], shown


def elicit(properties: dict[str, Any]) -> Any:
    params = mcp_types.ElicitRequestFormParams(
        message="Which one?", requested_schema={"type": "object", "properties": properties}
    )
    return mcp_types.InputRequiredResult(input_requests={"k": mcp_types.ElicitRequest(params=params)},
                                         request_state="state")  # fmt: skip


def test_an_mcp_servers_choices_in_the_questions_text_mention_nobody() -> None:
    ask = inputs.ask_for("tickets", elicit({"who": {"type": "string", "enum": [HOSTILE, "nobody"]}}))
    assert ask.options[0] == HOSTILE  # matched and sent back to the server as it gave it
    text = blocks.question_text(ask.text, ask.options)
    assert live(text) == [], text


def test_an_mcp_servers_field_names_in_the_questions_text_mention_nobody() -> None:
    one = inputs.ask_for("tickets", elicit({"<@U0BOSS>": {"type": "string"}}))
    two = inputs.ask_for("tickets", elicit({"<@U0BOSS>": {"type": "string"}, "<#C0OPS>": {"type": "string"}}))
    for ask in (one, two):
        text = blocks.question_text(ask.text, ask.options)
        assert live(text) == [], text
        shown = blocks.question_blocks("q1", ask.text, ask.options)[0].text.text
        assert live(shown) == [], shown


def _texts(value: Any) -> list[dict[str, Any]]:
    """Every Block Kit text object in ``value``."""
    if isinstance(value, dict):
        found = [value] if value.get("type") in {"plain_text", "mrkdwn"} and "text" in value else []
        return found + [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def test_the_edit_modal_shows_a_servers_schema_and_the_calls_arguments_inertly() -> None:
    """A modal is opened with ``views.open``, outside the posting path that quiets tokens: what an MCP server wrote
    (argument names, descriptions, choices) and what the model chose (values) reach it only as plain text, and its
    own mrkdwn forms nothing live from them."""
    from shared.slack import edit_modal

    schema = {"type": "object", "required": ["<!channel>"], "properties": {
        "<!channel>": {"type": "string", "description": HOSTILE},
        "who": {"type": "string", "enum": [HOSTILE, "b"]},
        "spec": {"type": "object", "description": "<@U0CFO>"},
    }}  # fmt: skip
    args = {"<!channel>": HOSTILE, "who": HOSTILE, "spec": {"x": HOSTILE}, "extra": HOSTILE}
    view = edit_modal.view("a1|d1", "mcp.tickets.create", schema=schema, args=args, order=["<!channel>"]).to_dict()
    texts = _texts(view)
    assert any(HOSTILE in t["text"] for t in texts)  # shown, as plain text
    for text in texts:
        assert text["type"] == "plain_text" or live(text["text"]) == [], text
    assert view["title"]["type"] == "plain_text"

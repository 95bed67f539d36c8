"""The model's Markdown in Slack's markdown block: answers and progress updates use it with a mrkdwn text fallback,
long answers are split to fit its limit, and nothing in it can ping a channel or a user group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks
from shared.slack.mrkdwn import to_mrkdwn
from shared.slack.safety import neutralise_blocks
from shared.state.models import SessionStatus
from tests.agent_helpers import mention, wait_status

G = FakeGemini
Script = Callable[..., int]
ZWSP = "\u200b"

PINGS = (
    "Team <!channel> and <!here|here>, @everyone, <!subteam^S0DEVS|@devs>, "
    "&lt;!channel&gt;, &#60;!here&#62;, &#x3c;!subteam^S0OPS&#x3e; — see [the docs](https://docs.example.com/x)."
)


def markdown_of(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in message.get("blocks") or [] if b["type"] == "markdown"]


def assert_pings_nobody(text: str, *, markdown: bool = True) -> None:
    """No broadcast or user-group token; in Markdown (which decodes character references) not even one spelt with
    references. In mrkdwn an escaped ``&lt;!channel&gt;`` is shown as text, and pings nobody."""
    references = ("&lt;!", "&#60;!", "&#x3c;!") if markdown else ()
    for token in ("<!channel", "<!here", "<!everyone", "<!subteam", *references):
        assert token not in text, text
    for word in ("@channel", "@here", "@everyone"):
        assert word not in text, text  # only the quiet form, "@\u200bchannel", is left


def test_an_answer_is_a_markdown_block_with_the_feedback_buttons_on_the_last_message() -> None:
    last = [b.to_dict() for b in blocks.answer_blocks("**Done.**", "s1")]
    assert last[0] == {"type": "markdown", "text": "**Done.**"}
    assert last[1]["type"] == "context_actions"
    assert [b.to_dict() for b in blocks.answer_blocks("part one", None)] == [{"type": "markdown", "text": "part one"}]
    first_update = [b.to_dict() for b in blocks.progress_blocks("Looking at `x`", "s1") or []]
    assert [b["type"] for b in first_update] == ["markdown", "actions"]  # the Stop button
    assert blocks.progress_blocks("x" * (blocks.ANSWER_CHARS + 1), "s1") is None  # too long: mrkdwn text only


def test_nothing_in_a_markdown_block_can_ping() -> None:
    [shown] = neutralise_blocks(blocks.answer_blocks(PINGS, None))
    assert shown["type"] == "markdown"
    assert_pings_nobody(shown["text"])
    assert f"@{ZWSP}channel" in shown["text"]
    assert f"@{ZWSP}devs" in shown["text"]
    assert "[the docs](https://docs.example.com/x)" in shown["text"]  # a link stays a link (it is not unfurled)
    assert "<@U0HUMAN>" in neutralise_blocks(blocks.answer_blocks("ask <@U0HUMAN>", None))[0]["text"]
    # Neutralising can only lengthen a text by a fifth ("@here" gains one character): the split leaves room.
    grown = neutralise_blocks(blocks.answer_blocks("@here" * (blocks.ANSWER_CHARS // 5), None))[0]["text"]
    assert len(grown) <= blocks.MARKDOWN_CHARS


@pytest.mark.stack
def test_the_answer_goes_out_in_markdown_blocks_with_a_mrkdwn_fallback_and_pings_nobody(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.call("post_update", text="Looking at **it**"), G.text(f"## Result\n\n{PINGS}"))
    thread = mention(fake_slack, f"C{uid}", "summarise")
    wait_status(thread.session_id, SessionStatus.DONE)
    update, answer = fake_slack.bot_replies(thread.channel, thread.ts)
    assert markdown_of(update) == ["Looking at **it**"]
    assert update["text"] == "Looking at *it*"
    [shown] = markdown_of(answer)
    assert shown.startswith("## Result\n\n")
    assert_pings_nobody(shown)
    assert_pings_nobody(answer["text"], markdown=False)
    assert answer["text"].startswith("*Result*\n\n")  # the fallback is mrkdwn
    for call in fake_slack.calls("chat.postMessage"):
        if call["args"].get("channel") == thread.channel:
            assert call["args"]["unfurl_links"] in (False, "0", "false")  # no link is fetched by Slack
            assert call["args"]["unfurl_media"] in (False, "0", "false")


@pytest.mark.stack
def test_a_long_answer_is_split_into_markdown_blocks_slack_accepts(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum **dolor** sit amet " * 40 for i in range(12)]
    code = "```python\n" + "\n".join(f"print('line {i}')" for i in range(400)) + "\n```"
    markdown = "\n\n".join([*paragraphs[:6], code, *paragraphs[6:]])
    assert len(markdown) > 3 * blocks.ANSWER_CHARS
    script(G.text(markdown))
    thread = mention(fake_slack, f"C{uid}", "write a lot")
    wait_status(thread.session_id, SessionStatus.DONE)
    posted = fake_slack.bot_replies(thread.channel, thread.ts)
    assert len(posted) >= 4
    parts = [markdown_of(message) for message in posted]
    assert all(len(part) == 1 and 0 < len(part[0]) <= blocks.ANSWER_CHARS for part in parts)
    assert all(part[0].count("```") % 2 == 0 for part in parts)  # a code block cut in two is closed and reopened
    assert [message["text"] for message in posted] == [to_mrkdwn(part[0]) for part in parts]
    with_feedback = [any(b["type"] == "context_actions" for b in m["blocks"]) for m in posted]
    assert with_feedback == [False] * (len(posted) - 1) + [True]  # the feedback buttons: on the last message only
    joined = "\n".join(part[0] for part in parts)
    assert all(f"print('line {i}')" in joined for i in range(400))
    assert all(f"Paragraph {i}:" in joined for i in range(12))


@pytest.mark.stack
def test_the_fake_refuses_markdown_blocks_over_slacks_limit(fake_slack: FakeSlack, uid: str) -> None:
    fake_slack.user_message("U0HUMAN", f"C{uid}", "hello")
    web = WebClient(token=local.BOT_TOKEN, base_url=fake_slack.base_url + "/api/")

    def refused(markdown_blocks: list[dict[str, Any]]) -> str:
        with pytest.raises(SlackApiError) as error:
            web.chat_postMessage(channel=f"C{uid}", text="fallback", blocks=markdown_blocks)
        return str(error.value.response["error"])

    assert refused([{"type": "markdown", "text": "x" * (blocks.MARKDOWN_CHARS + 1)}]) == "invalid_blocks"
    assert refused([{"type": "markdown", "text": ""}]) == "invalid_blocks"
    half = {"type": "markdown", "text": "x" * (blocks.MARKDOWN_CHARS // 2 + 1)}
    assert refused([half, half]) == "msg_blocks_too_long"  # the limit is for all of a message's markdown blocks
    web.chat_postMessage(channel=f"C{uid}", text="fallback", blocks=[{"type": "markdown", "text": "x" * 12_000}])


@pytest.mark.stack
def test_an_answer_whose_markdown_block_slack_refuses_goes_out_as_mrkdwn(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.text("The answer is **42**."))
    fake_slack.fail("chat.postMessage", error="invalid_blocks")  # e.g. Slack counts the block's size otherwise
    thread = mention(fake_slack, f"C{uid}", "what is it?")
    wait_status(thread.session_id, SessionStatus.DONE)
    [answer] = fake_slack.bot_replies(thread.channel, thread.ts)
    assert markdown_of(answer) == []
    assert answer["text"] == "The answer is *42*."
    assert [b["type"] for b in answer["blocks"]] == ["context_actions"]  # the feedback buttons stay


@pytest.mark.stack
def test_a_link_whose_label_names_another_host_shows_the_host_it_opens(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """A label reading like one address on a link to another (prompt injection's phishing link) names its real
    host, in the markdown block and in the mrkdwn text; an ordinary label stays as it is."""
    script(
        G.text(
            "Sign in at [https://sso.corp.example](https://evil.example/login), see [the runbook](https://x.example/r)."
        )
    )
    thread = mention(fake_slack, f"C{uid}", "where do I sign in?")
    wait_status(thread.session_id, SessionStatus.DONE)
    [answer] = fake_slack.bot_replies(thread.channel, thread.ts)
    [shown] = markdown_of(answer)
    assert "[https://sso.corp.example (evil.example)](https://evil.example/login)" in shown
    assert "<https://evil.example/login|https://sso.corp.example (evil.example)>" in answer["text"]
    assert "[the runbook](https://x.example/r)" in shown
    assert "<https://x.example/r|the runbook>" in answer["text"]

"""A streamed answer never pings (issue 24 item 1): the text Slack assembles from every ``markdown_text`` piece of a
streamed message holds no broadcast or user-group token in any spelling, wherever the model's text is split. Every
split point of a hostile answer goes through the real stream path: a model turn (shared/agent/streamed.py) whose
text arrives in pieces, the answer stream (shared/slack/stream.py) and slack-sdk's ``WebClient`` against the fake
Slack served in this process; the check on what Slack got is independent of the product's neutraliser."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from google.genai import types

from infra.fakes.slack.client import FakeSlack
from shared.agent import model as gemini
from shared.agent import streamed
from shared.slack.safety import neutralise, neutralise_markdown
from shared.slack.stream import AnswerStream
from shared.slack.stream_safety import inert, safe_cut
from shared.slack.surface import ThreadSurface
from tests.agent_helpers import HUMAN
from tests.surfaces import slack_thread

LABEL = "the on-call rotation for billing, payments, the ledger and everything else that pages at night"
HOSTILE = (
    f"Done. <!channel|{LABEL}> then &lt;!here&gt; and &#60;!everyone&#62; and &#x3C;&#33;here&#x3E; and "
    "<!subteam^S0OPS|@oncall> and @here and &commat;channel and <!here x <!channel>> and <!EVERYONE> bye."
)
# Independent of shared/slack/safety.py: a token as Slack's mrkdwn reads one, on the text as sent and as Markdown
# decodes its character references.
TOKEN = re.compile(r"<!(?:here|channel|everyone|group|subteam)\b[^<>]*>|(?<![\w@])@(?:here|channel|everyone)\b",
                   re.IGNORECASE)  # fmt: skip


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text) + TOKEN.findall(html.unescape(text))


def test_the_hostile_answer_is_hostile() -> None:
    """The oracle finds every token the answer is built from (so its silence below means something)."""
    assert len(tokens(HOSTILE)) >= 9
    assert tokens(neutralise_markdown(HOSTILE)) == []


def test_a_token_emptied_out_of_a_label_leaves_no_token_around_it() -> None:
    assert tokens(neutralise("<!here x <!channel>>")) == []
    assert tokens(neutralise_markdown("&lt;!here x <!channel>&gt;")) == []


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("hello <!chan", len("hello ")),
        ("ping @chan", len("ping ")),
        ("a <@U1> b", len("a <@U1> b")),
        ("x &l", len("x ")),  # "&lt;" may follow
        (f"see <!channel|{LABEL}", len("see ")),  # however long the label is
        (f"see &lt;!here|{LABEL}", len("see ")),
        ("<!here x <!chan", 0),  # the later "<" rules the first out only while it is there
        ("if a < b then " + "x" * 100, 114),  # a less-than sign is not a token's beginning
        ("<!date^1|today> ok", len("<!date^1|today> ok")),
    ],
)
def test_a_piece_is_cut_before_any_unfinished_token(text: str, cut: int) -> None:
    assert safe_cut(text) == cut


@pytest.mark.parametrize("text", ["hello <!chan", "x &l", f"&lt;!here|{LABEL}", "<!here x <!chan", "ping @chan"])
def test_an_unfinished_token_at_a_messages_end_is_made_inert(text: str) -> None:
    ended = inert(text)
    assert ended.replace("\u200b", "") == text
    assert safe_cut(ended) == len(ended)
    for rest in ("nel>", "t;!here&gt;", "&gt;", ">", "nel", "here>", "channel>"):
        assert tokens(ended + rest) == [], rest


# --- through the stream path, every split point --------------------------------------------------------------


@pytest.fixture
def thread() -> Iterator[tuple[ThreadSurface, FakeSlack]]:
    with slack_thread() as surface:
        yield surface


def model_says(monkeypatch: pytest.MonkeyPatch, pieces: Sequence[str]) -> None:
    """The model streams ``pieces`` as one turn's text (google-genai's streaming call, as the product reads it)."""

    def generate_stream(*_: Any, on_text: Any, **__: Any) -> types.GenerateContentResponse:
        for piece in pieces:
            on_text(piece)
        content = types.Content(role="model", parts=[types.Part(text="".join(pieces))])
        return types.GenerateContentResponse(candidates=[types.Candidate(content=content)])

    monkeypatch.setattr(gemini, "generate_stream", generate_stream)


def assembled(fake: FakeSlack, ts: str) -> str:
    """The text Slack puts together from every piece appended to the streamed message ``ts``."""
    pieces = [ch["text"] for c in fake.calls("chat.appendStream") if c["args"]["ts"] == ts
              for ch in c["args"].get("chunks") or [] if ch["type"] == "markdown_text"]  # fmt: skip
    return "".join(pieces)


def stream_answer(
    surface: ThreadSurface, fake: FakeSlack, monkeypatch: pytest.MonkeyPatch, pieces: Sequence[str], n: int
) -> str:
    surface.stream = AnswerStream("C1", surface.thread_ts, recipient=HUMAN, on_open=lambda _: None, buffer_chars=1)
    model_says(monkeypatch, pieces)
    response = streamed.model_turn(surface, [], system="s", tools=[])
    text = response.text or ""
    [ts] = surface.answer(text, key=f"s:{n}:answer", feedback="s")
    assert surface.stream.ts == ts  # it was streamed, not posted whole
    return assembled(fake, ts)


def test_no_split_of_a_hostile_answer_lets_slack_assemble_a_token(
    thread: tuple[ThreadSurface, FakeSlack], monkeypatch: pytest.MonkeyPatch
) -> None:
    surface, fake = thread
    for at in range(1, len(HOSTILE)):
        shown = stream_answer(surface, fake, monkeypatch, [HOSTILE[:at], HOSTILE[at:]], at)
        assert tokens(shown) == [], (at, shown)
        assert shown.replace("\u200b", "").startswith("Done. "), at
        assert shown.endswith(" bye."), at
        assert LABEL not in shown or "<!channel|" not in shown  # the long label never kept its token


def test_an_answer_streamed_a_character_at_a_time_pings_nobody_and_keeps_its_words(
    thread: tuple[ThreadSurface, FakeSlack], monkeypatch: pytest.MonkeyPatch
) -> None:
    surface, fake = thread
    shown = stream_answer(surface, fake, monkeypatch, list(HOSTILE), 0)
    assert tokens(shown) == []
    for word in ("Done.", "oncall", "bye."):
        assert word in shown


def test_text_held_back_as_a_tokens_beginning_is_sent_inert_when_too_long(
    thread: tuple[ThreadSurface, FakeSlack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An opening that never closes does not hold the answer back for the rest of the turn."""
    surface, fake = thread
    opening = "Look: <!channel|" + "a label that goes on and on " * 100  # 2,800 characters, no ">" yet
    pieces = [opening[i : i + 100] for i in range(0, len(opening), 100)] + ["> the end."]
    surface.stream = AnswerStream("C1", surface.thread_ts, recipient=HUMAN, on_open=lambda _: None, buffer_chars=1)
    model_says(monkeypatch, pieces)
    streamed.model_turn(surface, [], system="s", tools=[])
    ts = surface.stream.ts
    assert ts is not None
    sent = [ch["text"] for c in fake.calls("chat.appendStream") if c["args"]["ts"] == ts
            for ch in c["args"].get("chunks") or [] if ch["type"] == "markdown_text"]  # fmt: skip
    assert len(sent) > 2  # "Look: ", then the rest as it comes once past the cap, not all of it at the end
    assert tokens("".join(sent)) == []

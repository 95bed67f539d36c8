"""No bot post shows a link whose label reads like one address while it goes to another: the label names its real
host (shared/slack/links.py, applied by shared/slack/safety.py to every post, update and streamed piece), and a
streamed answer cannot form such a link across two pieces (shared/slack/stream_safety.py). The checks on what
Slack would show are independent of the product's parser."""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterator

import pytest

from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks
from shared.slack.mrkdwn import to_mrkdwn
from shared.slack.safety import neutralise, neutralise_blocks, neutralise_markdown
from shared.slack.stream_safety import inert, safe_cut
from shared.slack.surface import ThreadSurface
from tests.fast.test_stream_safety import stream_answer
from tests.surfaces import slack_thread

PHISH = "[https://sso.corp.example](https://evil.example/login)"
# A link as a reader meets one: Markdown's "[label](url)" and mrkdwn's "<url|label>", in the text as written and
# with its character references decoded.
LINK = re.compile(r"(?<!\\)\[([^\[\]]*)\]\(\s*([^()\s]*)[^()]*\)|<([^<>|\u200b][^<>|]*)\|([^<>]*)>")


def labels_hiding(text: str) -> list[str]:
    """Every label that reads "corp.example" (as a reader sees it) on a link to evil.example, without showing that."""
    found = []
    for view in (text, html.unescape(text)):
        for m in LINK.finditer(view):
            label, url = (m.group(1), m.group(2)) if m.group(2) is not None else (m.group(4), m.group(3))
            seen = unicodedata.normalize("NFKC", re.sub(r"[\\*_~\u200b]", "", label))
            if "evil.example" in url.replace("\\", "") and "corp.example" in seen and "evil.example" not in label:
                found.append(label)
    return found


@pytest.mark.parametrize(
    "markdown",
    [
        PHISH,
        "[sso.corp.example](https://evil.example/login)",
        "see [**sso**.corp.example](https://evil.example) now",  # emphasis inside the label
        "[sso&#46;corp&#46;example](https://evil.example)",  # references Markdown decodes
        "[sso\\.corp\\.example](https://evil.example)",  # escapes
        "[sso\u200b.corp.example](https://evil.example)",  # an invisible character
        "[sso\uff0ecorp\uff0eexample](https://evil.example)",  # a full-width dot
        "[sso.corp.example](https://sso.corp.example@evil.example/)",  # the host is after the "@"
        "[sso.corp.example](https://evil.example\\\\@sso.corp.example)",  # a backslash ends the host
        "[sso.corp.example](https://evil.example/login 'Sign in')",  # with a title
        "![www.corp.example](https://evil.example/a.png)",  # an image, which Slack shows as a link
        "&#91;sso.corp.example&#93;(https://evil.example)",  # brackets written as references
        "<https://evil.example/login|sso.corp.example>",  # mrkdwn's form
        "&lt;https://evil.example|sso.corp.example&gt;",
        "[sso.corp.example" + " and more" * 60 + "](https://evil.example)",  # a long label: not judged, given the host
    ],
)
def test_a_label_that_names_another_host_shows_the_real_one(markdown: str) -> None:
    shown = neutralise_markdown(markdown)
    assert labels_hiding(shown) == [], shown
    assert "(evil.example)" in shown
    assert neutralise_markdown(shown) == shown  # shown once, however often it is neutralised
    assert labels_hiding(neutralise(to_mrkdwn(markdown))) == []  # the mrkdwn text fallback too


def test_a_look_alike_host_is_shown_in_ascii() -> None:
    shown = neutralise_markdown("[sso.corp.example](https://\u0455\u0455\u043e.corp.example/)")  # Cyrillic s, s, o
    assert "(xn--" in shown


@pytest.mark.parametrize(
    "markdown",
    [
        "[the runbook](https://evil.example/runbook)",
        "[PR 42](https://github.com/o/r/pull/42)",
        "[https://docs.example.com/x](https://docs.example.com/x)",
        "[docs.example.com](https://docs.example.com/a/b)",
        "[www.x.com](https://x.com/)",
        "[HTTPS://Docs.Example.com](https://docs.example.com)",
        "<https://docs.example.com|docs.example.com>",
        "a [link](https://x.example) and `[code](x)`",
    ],
)
def test_ordinary_labels_and_labels_naming_their_own_host_stay(markdown: str) -> None:
    assert neutralise_markdown(markdown) == markdown
    assert neutralise(markdown) == markdown


def test_every_post_path_shows_the_host() -> None:
    text = neutralise(to_mrkdwn(PHISH))
    assert text == "<https://evil.example/login|https://sso.corp.example (evil.example)>"
    [markdown, context] = neutralise_blocks(
        [*blocks.answer_blocks(PHISH, None), {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}]
    )
    assert markdown["text"] == "[https://sso.corp.example (evil.example)](https://evil.example/login)"
    assert labels_hiding(context["elements"][0]["text"]) == []
    rich = {"type": "rich_text", "elements": [{"type": "rich_text_section", "elements": [
        {"type": "link", "url": "https://evil.example/login", "text": "sso.corp.example"},
        {"type": "link", "url": "https://x.example/r", "text": "the runbook"},
    ]}]}  # fmt: skip
    [shown] = neutralise_blocks([rich])
    links = shown["elements"][0]["elements"]
    assert [link["text"] for link in links] == ["sso.corp.example (evil.example)", "the runbook"]


def test_a_reference_definition_makes_no_link() -> None:
    shown = neutralise_markdown("[sso.corp.example][1]\n\n[1]: https://evil.example/login")
    assert "\\[1]: https://evil.example/login" in shown  # Markdown shows "[1]: ..." as text


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("see [sso.corp", len("see ")),  # the label may go on
        ("see [sso.corp.example]", len("see ")),  # "(url)" may follow
        ("see [sso.corp.example](https://evil", len("see ")),  # the URL may go on
        ("see ![sso.corp.example](", len("see !")),
        ("see &#91;sso.corp.example", len("see ")),
        ("see <https://evil.example|sso.co", len("see ")),  # mrkdwn's form
        ("see [a](https://x.example) ok", len("see [a](https://x.example) ok")),
        ("- [ ] a task and more", len("- [ ] a task and more")),  # a checkbox is no link's beginning
        ("[note]\n\nmore text", len("[note]\n\nmore text")),  # a blank line ends it
    ],
)
def test_a_piece_is_cut_before_an_unfinished_link(text: str, cut: int) -> None:
    assert safe_cut(text) == cut


@pytest.mark.parametrize("text", ["see [sso.corp", "see [sso.corp.example]", "[sso.corp.example](https://ev"])
def test_an_unfinished_link_at_a_messages_end_is_made_inert(text: str) -> None:
    ended = inert(text)
    assert safe_cut(ended) == len(ended)
    for rest in (".example](https://evil.example)", "(https://evil.example)", "il.example)"):
        assert labels_hiding(ended + rest) == [], rest  # Markdown reads an escaped "[" as text


# --- through the stream path, every split point --------------------------------------------------------------


@pytest.fixture
def thread() -> Iterator[tuple[ThreadSurface, FakeSlack]]:
    with slack_thread() as surface:
        yield surface


def test_no_split_of_an_answer_lets_slack_assemble_a_link_that_hides_its_host(
    thread: tuple[ThreadSurface, FakeSlack], monkeypatch: pytest.MonkeyPatch
) -> None:
    surface, fake = thread
    answer = f"Sign in at {PHISH} or <https://evil.example|sso.corp.example> today."
    for at in range(1, len(answer)):
        shown = stream_answer(surface, fake, monkeypatch, [answer[:at], answer[at:]], at)
        assert labels_hiding(shown) == [], (at, shown)
        assert shown.count("(evil.example)") == 2, (at, shown)
        assert shown.startswith("Sign in at "), at
        assert shown.endswith(" today."), at

"""What no bot post may do: ping a whole channel or a user group, or show a link whose label hides where it goes,
whoever wrote the text.

The model's text, and untrusted text it repeats, may carry Slack's broadcast tokens (``<!channel>``, ``<!here>``,
``<!everyone>``, the legacy ``<!group>``, ``<!subteam^…>``, each with or without a ``|label``) or their plain
forms (``@channel``). Every post, update and ephemeral goes through ``neutralise`` on its text and on every text
inside its blocks: the tokens stay readable, and ping no one. Rich text's ``broadcast`` and ``usergroup`` elements
(the block form of the same pings, e.g. in a quoted message) become plain text. User mentions (``<@U…>``, the
product's own operator mentions among them), channel links and other special tokens (``<!date…>``) are left alone.

Neutralising runs until nothing changes: taking a token out of a label (``<!here x <!channel>>``) must not leave
the outer one whole.

A ``markdown`` block's text (and a stream's ``markdown_text``) is Markdown, which Slack parses before it renders:
there a character reference (``&lt;!channel&gt;``, ``&#60;!here&#62;``, ``&#x3c;&#33;here>``, ``&commat;here``)
becomes the character it names, so ``neutralise_markdown`` looks for the tokens in the text as the references
decode, and quiets them where they are written. A streamed answer reaches Slack in pieces; what may be cut where
is ``shared/slack/stream_safety.py``'s.

A link whose label reads like another address than the one it opens (``[sso.corp.example](https://evil.example)``,
``<https://evil.example|sso.corp.example>``, a rich text ``link`` element) gets its real host into its label, in
every view and round above: ``shared/slack/links.py``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any

from shared.slack.links import disclosure, markdown_disclosures, mrkdwn_disclosures

# A zero-width space after "@" keeps the word readable and makes it no mention.
_QUIET_AT = "@\u200b"
NAMES = ("here", "channel", "everyone", "group", "subteam")  # what may follow "<!" in a broadcast/group token
PLAIN_NAMES = ("here", "channel", "everyone")  # what may follow a plain "@"
_BROADCAST = re.compile(r"<!(here|channel|everyone|group)\b[^<>]*>", re.IGNORECASE)
_SUBTEAM = re.compile(r"<!subteam\b[^<>|]*(?:\|@?([^<>]*))?>", re.IGNORECASE)
_PLAIN = re.compile(r"(?<![\w@])@(here|channel|everyone)\b", re.IGNORECASE)
# A character reference as an HTML5 (and so a Markdown) parser reads one, the ";" optional as legacy names allow.
REFERENCE = re.compile(r"&(?:#[0-9]+|#x[0-9a-f]+|[a-z][a-z0-9]*);?", re.IGNORECASE)
_ROUNDS = 64  # every round takes a token out; a text holding more nested tokens than this is quieted whole


def neutralise(text: str) -> str:
    """``text`` with every broadcast and user-group mention turned into text that pings nobody, and every link
    label that hides where its link goes followed by its host (``shared.slack.links``)."""
    for _ in range(_ROUNDS):
        quiet = _inserted(_quiet_once(text), mrkdwn_disclosures)
        if quiet == text:
            return text
        text = quiet
    return text.replace("<", "&lt;").replace("@", _QUIET_AT)  # too deeply nested to take apart: no brackets left


def _inserted(text: str, find: Callable[[str], list[tuple[int, str]]]) -> str:
    """``text`` with what ``find`` says inserted where it says."""
    for at, add in sorted(find(text), reverse=True):
        text = text[:at] + add + text[at:]
    return text


def _quiet_once(text: str) -> str:
    text = _BROADCAST.sub(lambda m: f"{_QUIET_AT}{m.group(1).lower()}", text)
    text = _SUBTEAM.sub(lambda m: f"{_QUIET_AT}{m.group(1) or 'group'}", text)
    return _PLAIN.sub(lambda m: f"{_QUIET_AT}{m.group(1)}", text)


def decoded(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with its character references decoded, and for each decoded character the span of ``text`` it
    was written as (a reference's every character has the whole reference's span)."""
    chars: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for ref in REFERENCE.finditer(text):
        chars.extend(text[at : ref.start()])
        spans.extend((i, i + 1) for i in range(at, ref.start()))
        value = html.unescape(ref.group())
        if value == ref.group():  # not a reference ("&nope;"): its characters stand for themselves
            chars.extend(value)
            spans.extend((i, i + 1) for i in range(ref.start(), ref.end()))
        else:
            chars.extend(value)
            spans.extend((ref.start(), ref.end()) for _ in value)
        at = ref.end()
    chars.extend(text[at:])
    spans.extend((i, i + 1) for i in range(at, len(text)))
    return "".join(chars), spans


_QUIETED: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_BROADCAST, lambda m: m.group(1).lower()),
    (_SUBTEAM, lambda m: m.group(1) or "group"),
    (_PLAIN, lambda m: m.group(1)),
)  # each token, and the name its quiet form shows


def neutralise_markdown(text: str) -> str:
    """``neutralise`` for Markdown: the tokens are caught however Markdown spells their characters, and so are
    links whose label hides where they go (``[label](url)`` as well as mrkdwn's form)."""
    for _ in range(_ROUNDS):
        written = text
        text = _inserted(neutralise(text), markdown_disclosures)
        plain, spans = decoded(text)
        if plain != text:
            found: list[tuple[int, int, str]] = []
            for pattern, name in _QUIETED:
                found += [(spans[m.start()][0], spans[m.end() - 1][1], f"{_QUIET_AT}{name(m)}")
                          for m in pattern.finditer(plain)]  # fmt: skip
            found += [(spans[at][0], spans[at][0], add)
                      for at, add in markdown_disclosures(plain) + mrkdwn_disclosures(plain)]  # fmt: skip
            end = len(text) + 1
            for start, stop, shown in sorted(found, reverse=True):  # from the end, so spans stay valid; no overlaps
                if stop <= end:
                    text, end = text[:start] + shown + text[stop:], start
        if text == written:
            return text
    return _inserted(neutralise(text.replace("&", "&amp;")), markdown_disclosures)


def neutralise_blocks(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Block Kit blocks (objects or dicts) as dicts, with every ``text`` string in them neutralised."""
    return [_walk(block.to_dict() if hasattr(block, "to_dict") else block) for block in blocks]


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("type") == "broadcast":  # rich text's @here / @channel / @everyone
            return {"type": "text", "text": f"{_QUIET_AT}{value.get('range') or 'channel'}"}
        if value.get("type") == "usergroup":  # rich text's user-group mention
            return {"type": "text", "text": f"{_QUIET_AT}group"}
        if value.get("type") == "markdown" and isinstance(value.get("text"), str):
            return {**value, "text": neutralise_markdown(value["text"])}
        if value.get("type") == "link" and isinstance(value.get("text"), str):  # rich text's link: its label
            value = {**value, "text": value["text"] + disclosure(value["text"], str(value.get("url") or ""))}
        return {k: neutralise(v) if k == "text" and isinstance(v, str) else _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(item) for item in value]
    return value

"""What no bot post may do: ping a whole channel or a user group, whoever wrote the text.

The model's text, and untrusted text it repeats, may carry Slack's broadcast tokens (``<!channel>``, ``<!here>``,
``<!everyone>``, the legacy ``<!group>``, ``<!subteam^…>``, each with or without a ``|label``) or their plain
forms (``@channel``). Every post, update and ephemeral goes through ``neutralise`` on its text and on every text
inside its blocks: the tokens stay readable, and ping no one. Rich text's ``broadcast`` and ``usergroup`` elements
(the block form of the same pings, e.g. in a quoted message) become plain text. User mentions (``<@U…>``, the
product's own operator mentions among them), channel links and other special tokens (``<!date…>``) are left alone.

A ``markdown`` block's text is Markdown, which Slack parses before it renders: there a character reference
(``&lt;!channel&gt;``, ``&#60;!here&#62;``) becomes the character it names, so the same tokens written with
references for their brackets are neutralised too (``neutralise_markdown``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# A zero-width space after "@" keeps the word readable and makes it no mention.
_QUIET_AT = "@\u200b"
_BROADCAST = re.compile(r"<!(here|channel|everyone|group)\b[^<>]*>", re.IGNORECASE)
_SUBTEAM = re.compile(r"<!subteam\b[^<>|]*(?:\|@?([^<>]*))?>", re.IGNORECASE)
_PLAIN = re.compile(r"(?<![\w@])@(here|channel|everyone)\b", re.IGNORECASE)


# "<" and ">" as Markdown may write them: the characters themselves, or character references naming them.
_LT = r"(?:<|&lt;|&#0*60;|&#x0*3c;)"
_GT = r"(?:>|&gt;|&#0*62;|&#x0*3e;)"
_INSIDE = rf"(?:(?!{_GT})[^<>\n])"
_MD_BROADCAST = re.compile(rf"{_LT}!(here|channel|everyone|group)\b{_INSIDE}*{_GT}", re.IGNORECASE)
_MD_SUBTEAM = re.compile(rf"{_LT}!subteam\b(?:(?!{_GT})[^<>|\n])*(?:\|@?({_INSIDE}*))?{_GT}", re.IGNORECASE)


def neutralise(text: str) -> str:
    """``text`` with every broadcast and user-group mention turned into text that pings nobody."""
    text = _BROADCAST.sub(lambda m: f"{_QUIET_AT}{m.group(1).lower()}", text)
    text = _SUBTEAM.sub(lambda m: f"{_QUIET_AT}{m.group(1) or 'group'}", text)
    return _PLAIN.sub(lambda m: f"{_QUIET_AT}{m.group(1)}", text)


def neutralise_markdown(text: str) -> str:
    """``neutralise`` for a ``markdown`` block's text: the tokens are caught however Markdown spells their brackets."""
    text = _MD_BROADCAST.sub(lambda m: f"{_QUIET_AT}{m.group(1).lower()}", text)
    text = _MD_SUBTEAM.sub(lambda m: f"{_QUIET_AT}{m.group(1) or 'group'}", text)
    return neutralise(text)


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
        return {k: neutralise(v) if k == "text" and isinstance(v, str) else _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(item) for item in value]
    return value

"""What no bot post may do: ping a whole channel or a user group, whoever wrote the text.

The model's text, and untrusted text it repeats, may carry Slack's broadcast tokens (``<!channel>``, ``<!here>``,
``<!everyone>``, the legacy ``<!group>``, ``<!subteam^…>``, each with or without a ``|label``) or their plain
forms (``@channel``). Every post, update and ephemeral goes through ``neutralise`` on its text and on every text
inside its blocks: the tokens stay readable, and ping no one. Rich text's ``broadcast`` and ``usergroup`` elements
(the block form of the same pings, e.g. in a quoted message) become plain text. User mentions (``<@U…>``, the
product's own operator mentions among them), channel links and other special tokens (``<!date…>``) are left alone.
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


def neutralise(text: str) -> str:
    """``text`` with every broadcast and user-group mention turned into text that pings nobody."""
    text = _BROADCAST.sub(lambda m: f"{_QUIET_AT}{m.group(1).lower()}", text)
    text = _SUBTEAM.sub(lambda m: f"{_QUIET_AT}{m.group(1) or 'group'}", text)
    return _PLAIN.sub(lambda m: f"{_QUIET_AT}{m.group(1)}", text)


def neutralise_blocks(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Block Kit blocks (objects or dicts) as dicts, with every ``text`` string in them neutralised."""
    return [_walk(block.to_dict() if hasattr(block, "to_dict") else block) for block in blocks]


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("type") == "broadcast":  # rich text's @here / @channel / @everyone
            return {"type": "text", "text": f"{_QUIET_AT}{value.get('range') or 'channel'}"}
        if value.get("type") == "usergroup":  # rich text's user-group mention
            return {"type": "text", "text": f"{_QUIET_AT}group"}
        return {k: neutralise(v) if k == "text" and isinstance(v, str) else _walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(item) for item in value]
    return value

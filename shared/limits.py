"""Size limits on untrusted text, and how text is cut to them: stated, so the model and the reader know.

Thread messages, notes, answers, requests and tool results come from people and sites the product does not
trust; each is capped before it is stored or shown to the model, so a step always fits in a Firestore document.
"""

from __future__ import annotations

import json
import re
from typing import Any

from shared.errors import Refused

MAX_MESSAGE_CHARS = 4_000  # one thread message, note or answer
MAX_REQUEST_CHARS = 20_000  # the request that started the session, as the model sees it
MAX_THREAD_CHARS = 120_000  # the whole thread section of the opening prompt (newest messages kept)
TOO_LARGE_REQUEST_CHARS = 200_000  # a request longer than this is not used at all: the requester is told
# The thread messages a running session has not read yet, together: they are read in one step, kept on its document.
MAX_PENDING_NOTES_CHARS = 100_000
MAX_TOOL_RESULT_CHARS = 40_000  # one tool result, as stored in its step and sent to the model
# All the tool results of one step. Firestore's limit is 1 MiB per document, in UTF-8: up to 4 bytes a character.
MAX_STEP_CHARS = 200_000


def per_call_chars(calls: int) -> int:
    """What one tool result of a step of ``calls`` results may hold: the step stays within ``MAX_STEP_CHARS``."""
    return min(MAX_TOOL_RESULT_CHARS, MAX_STEP_CHARS // max(1, calls))


def capped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [truncated, {len(text):,} characters]"


MAX_JSON_DEPTH = 64  # arrays and objects inside each other in a JSON document from outside (Slack, a form, a task)


class UnusableJson(Refused, ValueError):
    """JSON that parses, or would, but that the product cannot use: nested too deep, or holding a lone surrogate."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def loads_untrusted(data: str | bytes) -> Any:
    """``json.loads`` of a document from outside the process; ValueError for one nested deeper than
    ``MAX_JSON_DEPTH`` (Python's parser raises RecursionError, not a ValueError, near a thousand levels, which
    3,000 characters of ``[`` reach; anything deep that did parse would fail later, wherever it is walked) or with
    a lone surrogate (``"\\ud800"`` parses, but no UTF-8 holds it: Firestore's client raises on the write)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise UnusableJson(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    level, deepest = [value], 0
    while level:
        deepest += 1
        if deepest > MAX_JSON_DEPTH:
            raise UnusableJson(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
        texts = [node for node in level if isinstance(node, str)]
        texts += [key for node in level if isinstance(node, dict) for key in node]
        if any(_SURROGATE.search(text) for text in texts):
            raise UnusableJson("JSON holds a lone surrogate (\\ud800-\\udfff), which no UTF-8 text can")
        level = [child for node in level if isinstance(node, (dict, list))
                 for child in (node.values() if isinstance(node, dict) else node)]  # fmt: skip
    return value

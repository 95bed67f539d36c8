"""A call as the people who decide it see it: every character of it, inertly, the arguments that matter first.

The exact call is JSON with one top-level argument per line, the tool's required arguments first in its schema's
order, then its other declared ones, then any others. It goes on the card as ``plain_text`` sections with emoji
off: Slack forms no markup, link, mention, code fence or emoji in plain text. On top of that the characters that
could still deceive are written as JSON escapes, so what is shown is valid JSON that parses to exactly the
arguments that run: controls, format characters (bidi overrides such as ``\\u202e``, zero-width ones), private-use
and unassigned code points, separators other than the space, invisible fillers and variation selectors; ``<``,
``>`` and ``&`` (never read as markup, even by a client that would); and the ``@`` of ``@here`` / ``@channel`` /
``@everyone`` (every post's broadcast neutraliser would otherwise change those characters on the way).

A call whose text is longer than ``MAX_SHOWN_CHARS`` cannot be shown on one message and so is never approved from
Slack. ``inline`` is the short, inert form of a value in the card's one-sentence summary.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

MAX_SHOWN_CHARS = 12_000  # the whole call's text; more cannot be approved from Slack
SECTION_CHARS = 2_900  # per plain_text section (Slack's limit is 3000, counted in UTF-16 code units)
MAX_INLINE_CHARS = 60  # a value in the summary sentence
GRAVE = "\u02cb"  # stands in for a backtick inside inline code, which a backtick would end

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Letters and marks that draw nothing: Hangul fillers, the braille blank, the combining grapheme joiner, Mongolian
# free variation selectors; plus the variation selector blocks.
_INVISIBLE = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800, 0x3164,
                        0xFFA0})  # fmt: skip
_MARKUP = frozenset("<>&")
_BROADCAST_AT = re.compile(r"(?<![\w@])@(?=(?:here|channel|everyone)\b)", re.IGNORECASE)


def hidden(char: str) -> bool:
    """True for a character that must be shown as an escape: it draws nothing, reorders text, or is markup."""
    code = ord(char)
    if char in _MARKUP or code in _INVISIBLE or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return True
    category = unicodedata.category(char)
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " ")


def escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a code point outside the BMP as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def visible(text: str) -> str:
    """``text`` (already JSON, or any text) with every hidden character as a ``\\uXXXX`` escape."""
    text = _BROADCAST_AT.sub(r"\\u0040", text)
    return "".join(escape(c) if hidden(c) else c for c in text)


def order(args: Mapping[str, Any], schema: Mapping[str, Any] | None) -> list[str]:
    """The arguments in the order they are shown: required ones in schema order, the other declared ones, the rest
    sorted."""
    properties = list((schema or {}).get("properties") or {})
    required = set((schema or {}).get("required") or [])
    declared = [p for p in properties if p in required] + [p for p in properties if p not in required]
    return [p for p in declared if p in args] + sorted(k for k in args if k not in set(declared))


def shown_call(tool: str, args: Mapping[str, Any], shown_order: Sequence[str] = ()) -> str:
    """The call as the card shows it: the tool's name, then its arguments as JSON, one top-level argument a line.

    Without the tool's name line the text is JSON that parses to exactly ``args``."""
    keys = [k for k in shown_order if k in args] + sorted(k for k in args if k not in set(shown_order))
    lines = [f"  {visible(_json(key))}: {visible(_json(args[key]))}" for key in keys]
    body = "{\n" + ",\n".join(lines) + "\n}" if lines else "{}"
    return f"{visible(tool)}\n{body}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ": "), default=str)


def presentable(text: str) -> bool:
    return len(text) <= MAX_SHOWN_CHARS


def too_large_error(tool: str, size: int) -> str:
    """What the model hears about a call too long to show an operator: nothing was posted, nothing ran."""
    return (
        f"not run: this {tool} call is too large to present to an operator for approval ({size} characters shown; "
        f"at most {MAX_SHOWN_CHARS}). Nothing was posted and nothing ran. Make a smaller call: shorter arguments, or "
        "the work split into several calls."
    )


def _units(text: str) -> int:
    """Length as Slack counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def chunks(text: str, limit: int = SECTION_CHARS) -> list[str]:
    """The text in pieces of at most ``limit`` UTF-16 units, cut at line ends where it can and never inside an
    escape; joined, the pieces are the text again."""
    pieces: list[str] = []
    current = ""
    for line in _lines_cut(text, limit):
        if current and _units(current + line) > limit:
            pieces.append(current)
            current = ""
        current += line
    if current or not pieces:
        pieces.append(current)
    return pieces


def _lines_cut(text: str, limit: int) -> Iterator[str]:
    for line in text.splitlines(keepends=True):
        rest = line
        while _units(rest) > limit:
            cut = _fit(rest, limit)
            yield rest[:cut]
            rest = rest[cut:]
        yield rest


def _fit(line: str, limit: int) -> int:
    """Where to cut a line too long for one piece: as far as fits, moved back before an escape it would split."""
    cut = min(len(line), limit)
    while _units(line[:cut]) > limit:
        cut -= 1
    backslash = line.rfind("\\", max(0, cut - 11), cut)
    if backslash > 0 and cut - backslash < 12:
        cut = backslash
    return max(cut, 1)


def inline(value: Any, limit: int = MAX_INLINE_CHARS) -> str:
    """A value for the summary sentence, as inline code that nothing can break out of: escaped for mrkdwn, no
    backtick or line break inside, hidden characters as escapes, long values cut with "…"."""
    text = value if isinstance(value, str) else _json(value)
    text = " ".join(text.splitlines())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = "".join(escape(c) if hidden(c) and c not in _MARKUP else c for c in text)
    text = text.replace("`", GRAVE).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"`{text}`"

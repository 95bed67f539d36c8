"""Markdown's inline constructs as Slack mrkdwn: emphasis, code spans, links, images, autolinks and bare URLs.

One line at a time, with CommonMark's delimiter-run rules for emphasis (so that ``snake_case`` and ``2 * 3`` stay as
written); ``&``, ``<`` and ``>`` outside Slack's own tokens are escaped. ``Style`` says how the result is written: as
mrkdwn, for a heading, or as plain text for inside a code block (a table). ``shared.slack.mrkdwn`` does the blocks.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

# Tokens Slack itself defines and the model may echo: mentions, channels, special mentions, dates.
_SLACK_TOKEN = re.compile(
    r"<(?:[@#][A-Z0-9][A-Z0-9._-]*|!(?:here|channel|everyone)|!subteam\^[A-Z0-9]+|!date\^[^<>|\n]+)(?:\|[^<>\n]*)?>"
)
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto|tel):[^\s<>|]+)(\|[^<>\n]*)?>", re.IGNORECASE)
_EMAIL_AUTOLINK = re.compile(r"<([A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)>")
_BARE_URL = re.compile(r"(?:https?://|www\.)[^\s<>]+", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt);)")
_URL_TRAILING = "?!.,:;*_~'\""
_MAX_PARENTHESES = 32  # CommonMark allows this limit on nesting in a link destination, against quadratic time


@dataclass(frozen=True)
class Style:
    """How inline constructs are written: as mrkdwn, or as plain text for inside a code block."""

    strong: str
    emphasis: str
    strike: str
    plain: bool = False


SLACK_STYLE = Style(strong="*", emphasis="_", strike="~")
HEADING_STYLE = Style(strong="", emphasis="_", strike="~")  # the heading line is bold already
PLAIN_STYLE = Style(strong="", emphasis="", strike="~~", plain=True)


@dataclass
class _Delimiter:
    """A run of ``*``, ``_`` or ``~~`` that may open or close emphasis (CommonMark's delimiter run)."""

    char: str
    length: int
    can_open: bool
    can_close: bool
    remaining: int = field(init=False)
    opens: list[str] = field(default_factory=list)
    closes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.remaining = self.length

    def render(self) -> str:
        # Closings use the start of the run and openings its end; matched markers sit innermost.
        return "".join(self.closes) + self.char * self.remaining + "".join(reversed(self.opens))


def _escape(text: str) -> str:
    """Escapes Slack's control characters; entities already written by the model are kept."""
    return _AMPERSAND.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")


def _is_punct(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


def inline(text: str, style: Style, *, links: bool = True) -> str:
    """One line's inline Markdown written in ``style`` (``links=False`` inside a link's label)."""
    nodes: list[str | _Delimiter] = []
    pending: list[str] = []
    brackets = _bracket_pairs(text) if links and "[" in text else None

    def atom(rendered: str) -> None:
        if pending:
            nodes.append("".join(pending) if style.plain else _escape("".join(pending)))
            pending.clear()
        nodes.append(rendered)

    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "\\" and i + 1 < n and text[i + 1] in _ASCII_PUNCT:
            pending.append(text[i + 1])
            i += 2
        elif found := _atom_at(text, i, style, brackets):
            atom(found[0])
            i = found[1]
        elif char in "`*_~":
            run = _run_length(text, i)
            if char == "`" or (char == "~" and run != 2):  # backticks that close nothing, or a lone tilde
                pending.append(text[i : i + run])
            else:
                atom("")
                nodes.append(_delimiter(text, i, run))
            i += run
        else:
            pending.append(char)
            i += 1
    atom("")
    _match_emphasis([node for node in nodes if isinstance(node, _Delimiter)], style)
    return "".join(node if isinstance(node, str) else node.render() for node in nodes)


def _atom_at(text: str, i: int, style: Style, brackets: dict[int, int] | None) -> tuple[str, int] | None:
    """A construct emphasis cannot look inside (code span, token, link, URL) at ``i``: its rendering and end."""
    char = text[i]
    if char == "`":
        run = _run_length(text, i)
        close = _closing_backticks(text, i + run, run)
        if close < 0:
            return None
        span = text[i : close + run]
        return (_plain_code(span[run:-run]) if style.plain else span), close + run
    if char == "<":
        return _angle_token(text, i, style)
    if char in "[!" and brackets is not None:
        return _link(text, i, style, brackets)
    if char in "hHwW" and (i == 0 or not text[i - 1].isalnum()) and (url := _bare_url(text, i)):
        return (url if style.plain else _escape(url)), i + len(url)
    return None


def _run_length(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] == text[start]:
        end += 1
    return end - start


def _closing_backticks(text: str, start: int, run: int) -> int:
    """Where a backtick run of exactly ``run`` closes a code span begun before ``start``, or -1."""
    i = text.find("`", start)
    while i >= 0:
        length = _run_length(text, i)
        if length == run:
            return i
        i = text.find("`", i + length)
    return -1


def _plain_code(content: str) -> str:
    return content[1:-1] if len(content) > 2 and content[0] == content[-1] == " " else content


def _delimiter(text: str, start: int, run: int) -> _Delimiter:
    before = text[start - 1] if start > 0 else " "
    after = text[start + run] if start + run < len(text) else " "
    left = not after.isspace() and (not _is_punct(after) or before.isspace() or _is_punct(before))
    right = not before.isspace() and (not _is_punct(before) or after.isspace() or _is_punct(after))
    # CommonMark's rule for "_" applied to "*" too: inside a word (2*3*4, snake_case) neither opens nor closes.
    return _Delimiter(
        char=text[start],
        length=run,
        can_open=left and (not right or _is_punct(before)),
        can_close=right and (not left or _is_punct(after)),
    )


def _match_emphasis(stack: list[_Delimiter], style: Style) -> None:
    """CommonMark's "process emphasis": pairs each closer with the nearest compatible opener.

    ``bottoms`` remembers, per kind of closer, below which point no opener can match, which keeps
    a line full of unmatched delimiters from costing quadratic time.
    """
    bottoms: dict[tuple[str, bool, int], int] = {}
    for current, closer in enumerate(stack):
        while closer.can_close and closer.remaining:
            key = (closer.char, closer.can_open, closer.length % 3)
            found = -1
            for j in range(current - 1, bottoms.get(key, -1), -1):
                opener = stack[j]
                if opener.char != closer.char or not opener.can_open or not opener.remaining:
                    continue
                both = opener.can_close or closer.can_open
                if both and (opener.length + closer.length) % 3 == 0 and (opener.length % 3 or closer.length % 3):
                    continue
                found = j
                break
            if found < 0:
                bottoms[key] = current - 1
                break
            opener = stack[found]
            use = 2 if opener.remaining >= 2 and closer.remaining >= 2 else 1
            marker = style.strike if closer.char == "~" else style.strong if use == 2 else style.emphasis
            opener.remaining -= use
            closer.remaining -= use
            opener.opens.append(marker)
            closer.closes.append(marker)
            for between in stack[found + 1 : current]:
                between.can_open = between.can_close = False  # emphasis cannot overlap: these stay literal


def _angle_token(text: str, start: int, style: Style) -> tuple[str, int] | None:
    if token := _SLACK_TOKEN.match(text, start):
        return token.group(0), token.end()
    if link := _AUTOLINK.match(text, start):
        url, label = link.group(1), link.group(2) or ""
        if style.plain:
            return (f"{label[1:]} ({url})" if label else url), link.end()
        return f"<{_link_url(url)}{label}>", link.end()
    if email := _EMAIL_AUTOLINK.match(text, start):
        address = email.group(1)
        return (address if style.plain else f"<mailto:{address}|{address}>"), email.end()
    return None


def _bare_url(text: str, start: int) -> str:
    match = _BARE_URL.match(text, start)
    if not match:
        return ""
    url = match.group(0)
    while url:
        last = url[-1]
        unbalanced = last in ")]" and url.count("(" if last == ")" else "[") < url.count(last)
        if last not in _URL_TRAILING and not unbalanced:
            break
        url = url[:-1]
    return url


def _link(text: str, start: int, style: Style, brackets: dict[int, int]) -> tuple[str, int] | None:
    """Parses ``[label](destination "title")`` or its image form at ``start``."""
    image = text[start] == "!"
    if image and not text.startswith("![", start):
        return None
    label_start = start + (2 if image else 1)
    label_end = brackets.get(label_start - 1, -1)
    if label_end < 0 or not text.startswith("(", label_end + 1):
        return None
    parsed = _destination(text, label_end + 2)
    if parsed is None:
        return None
    destination, end = parsed
    label = inline(text[label_start:label_end], style, links=False).strip()
    if style.plain:
        return (f"{label} ({destination})" if label else destination), end
    if not _SCHEME.match(destination):
        # Slack cannot follow relative links or anchors; keep what the reader can use.
        shown = label if destination.startswith("#") or not destination else f"{label} ({_escape(destination)})"
        return shown, end
    url = _link_url(destination)
    return (f"<{url}|{label}>" if label else f"<{url}>"), end


def _bracket_pairs(text: str) -> dict[int, int]:
    """Each ``[`` mapped to its ``]``, skipping escapes and code spans, in one pass over the line."""
    pairs: dict[int, int] = {}
    opened: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "`":
            run = _run_length(text, i)
            close = _closing_backticks(text, i + run, run)
            i = close + run if close >= 0 else i + run
            continue
        if char == "[":
            opened.append(i)
        elif char == "]" and opened:
            pairs[opened.pop()] = i
        i += 1
    return pairs


def _destination(text: str, start: int) -> tuple[str, int] | None:
    """Parses a link destination with balanced parentheses and an optional title, up to the closing ``)``."""
    n = len(text)
    i = _skip_spaces(text, start)
    chars: list[str] = []
    if i < n and text[i] == "<":
        close = text.find(">", i + 1)
        if close < 0:
            return None
        chars.append(text[i + 1 : close])
        i = close + 1
    else:
        depth = 0
        while i < n and not text[i].isspace():
            char = text[i]
            if char == "\\" and i + 1 < n and text[i + 1] in _ASCII_PUNCT:
                chars.append(text[i + 1])
                i += 2
                continue
            if char == "(":
                depth += 1
                if depth > _MAX_PARENTHESES:
                    return None
            elif char == ")":
                if depth == 0:
                    break
                depth -= 1
            chars.append(char)
            i += 1
    i = _skip_spaces(text, i)
    if i < n and text[i] in "\"'(":
        closing = ")" if text[i] == "(" else text[i]
        end = text.find(closing, i + 1)
        if end < 0:
            return None
        i = _skip_spaces(text, end + 1)
    if i >= n or text[i] != ")":
        return None
    return "".join(chars), i + 1


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _link_url(url: str) -> str:
    """A URL made safe inside ``<url|label>``: the characters that would end the token are percent-encoded."""
    for char, code in ((" ", "%20"), ("<", "%3C"), (">", "%3E"), ("|", "%7C")):
        url = url.replace(char, code)
    return _AMPERSAND.sub("&amp;", url)

"""Gemini's Markdown turned into Slack mrkdwn, cut into messages Slack shows whole.

Gemini answers in GitHub-flavoured Markdown; Slack's ``text`` field speaks mrkdwn, a
different dialect (``*bold*``, ``_italic_``, ``<url|label>``, no headings or tables)
in which ``&``, ``<`` and ``>`` are control characters. The conversion works line by
line for blocks (fences, tables, headings, lists, quotes) and with CommonMark's
delimiter-run rules for emphasis, so that ``snake_case`` and ``2 * 3`` stay as written.

Slack truncates a message's text beyond 40,000 characters and recommends staying under
4,000, so a long answer goes out as several messages; each chunk must render on its
own, which is why a code block cut in two is closed and reopened.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass, field

__all__ = ["DEFAULT_LIMIT", "MIN_LIMIT", "split_message", "to_mrkdwn", "to_slack_messages"]

DEFAULT_LIMIT = 3500
MIN_LIMIT = 100

_FENCE = "```"
_RULE = "———"
_BULLET = "•"
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HR = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_QUOTE = re.compile(r"^ {0,3}(?:>[ \t]?)+(.*)$")
_BULLET_ITEM = re.compile(r"^([ \t]*)[-*+][ \t]+(?:\[([ xX])\][ \t]+)?(.*)$")
_ORDERED_ITEM = re.compile(r"^([ \t]*)(\d{1,9}[.)])[ \t]+(.*)$")
_TABLE_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")

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


def to_slack_messages(markdown: str, limit: int = DEFAULT_LIMIT) -> list[str]:
    """The model's Markdown as the texts of the Slack messages that carry it, in order."""
    return split_message(to_mrkdwn(markdown), limit)


# --- Markdown to mrkdwn -------------------------------------------------------------------------


def to_mrkdwn(markdown: str) -> str:
    """Converts GitHub-flavoured Markdown to Slack mrkdwn; code is passed through untouched."""
    lines = markdown.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_OPEN.match(line)
        if fence and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            i = _code_block(lines, i, fence, out)
        elif i + 1 < len(lines) and _is_table_start(line, lines[i + 1]):
            i = _table(lines, i, out)
        else:
            out.append(_block_line(line))
            i += 1
    return "\n".join(out)


def _code_block(lines: list[str], start: int, fence: re.Match[str], out: list[str]) -> int:
    """Emits a fenced block without its language tag (Slack would show it as code) and returns the next line."""
    indent, marker = fence.group(1), fence.group(2)
    closing = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
    out.append(_FENCE)
    i = start + 1
    while i < len(lines) and not closing.match(lines[i]):
        out.append(_dedent(lines[i], len(indent)))
        i += 1
    out.append(_FENCE)  # an unclosed fence runs to the end, as in CommonMark, and is closed here
    return i + 1


def _dedent(line: str, width: int) -> str:
    """Removes up to the fence's own indentation, the part CommonMark does not count as content."""
    k = 0
    while k < width and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


def _block_line(line: str) -> str:
    if not line.strip():
        return ""
    if _HR.match(line):
        return _RULE
    if heading := _HEADING.match(line):
        title = _inline(heading.group(2) or "", _HEADING_STYLE).strip()
        return f"*{title}*" if title else ""
    if quote := _QUOTE.match(line):
        # Slack has no nested quotes, and a line starting ">>>" would quote the rest of the message.
        body = _block_line(quote.group(1))
        return f"> {body}" if body else ">"
    if item := _BULLET_ITEM.match(line):
        indent, box, text = item.groups()
        check = "" if box is None else ("☐ " if box == " " else "☑ ")
        return f"{indent}{_BULLET} {check}{_inline(text, _SLACK_STYLE)}"
    if item := _ORDERED_ITEM.match(line):
        indent, number, text = item.groups()
        return f"{indent}{number} {_inline(text, _SLACK_STYLE)}"
    return _inline(line, _SLACK_STYLE)


# --- Tables ---


def _is_table_start(header: str, delimiter: str) -> bool:
    return (
        "|" in header
        and "|" in delimiter
        and _TABLE_DELIMITER.match(delimiter) is not None
        and len(_cells(header)) == len(_cells(delimiter))
    )


def _cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(row)]


def _table(lines: list[str], start: int, out: list[str]) -> int:
    """Emits a pipe table as an aligned code block, since Slack has no tables; returns the next line."""
    header = [_inline(cell, _PLAIN_STYLE) for cell in _cells(lines[start])]
    aligns = [_alignment(cell) for cell in _cells(lines[start + 1])]
    rows = [header]
    i = start + 2
    while i < len(lines) and lines[i].strip() and "|" in lines[i] and not _FENCE_OPEN.match(lines[i]):
        cells = [_inline(cell, _PLAIN_STYLE) for cell in _cells(lines[i])][: len(header)]
        rows.append(cells + [""] * (len(header) - len(cells)))
        i += 1
    widths = [max(3, *(_width(row[c]) for row in rows)) for c in range(len(header))]
    rendered = [_table_row(row, widths, aligns) for row in rows]
    rendered.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    out.extend([_FENCE, *rendered, _FENCE])
    return i


def _alignment(delimiter_cell: str) -> str:
    left, right = delimiter_cell.startswith(":"), delimiter_cell.endswith(":")
    return "center" if left and right else "right" if right else "left"


def _table_row(cells: list[str], widths: list[int], aligns: list[str]) -> str:
    padded = []
    for cell, width, align in zip(cells, widths, aligns, strict=True):
        gap = width - _width(cell)
        if align == "right":
            padded.append(" " * gap + cell)
        elif align == "center":
            padded.append(" " * (gap // 2) + cell + " " * (gap - gap // 2))
        else:
            padded.append(cell + " " * gap)
    return "| " + " | ".join(padded) + " |"


def _width(text: str) -> int:
    """Columns the text takes in a monospaced font: wide East Asian characters and emoji take two."""
    total = 0
    for char in text:
        if unicodedata.combining(char) or char in "\u200d\ufe0f":
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total


# --- Inline conversion ---


@dataclass(frozen=True)
class _Style:
    """How inline constructs are written: as mrkdwn, or as plain text for inside a code block."""

    strong: str
    emphasis: str
    strike: str
    plain: bool = False


_SLACK_STYLE = _Style(strong="*", emphasis="_", strike="~")
_HEADING_STYLE = _Style(strong="", emphasis="_", strike="~")  # the heading line is bold already
_PLAIN_STYLE = _Style(strong="", emphasis="", strike="~~", plain=True)


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


def _inline(text: str, style: _Style, *, links: bool = True) -> str:
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


def _atom_at(text: str, i: int, style: _Style, brackets: dict[int, int] | None) -> tuple[str, int] | None:
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


def _match_emphasis(stack: list[_Delimiter], style: _Style) -> None:
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


def _angle_token(text: str, start: int, style: _Style) -> tuple[str, int] | None:
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


def _link(text: str, start: int, style: _Style, brackets: dict[int, int]) -> tuple[str, int] | None:
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
    label = _inline(text[label_start:label_end], style, links=False).strip()
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


# --- Splitting ----------------------------------------------------------------------------------

_WHITESPACE_RUN = re.compile(r"\s+")
_ATOMIC = re.compile(r"<[^<>\n]*>|&(?:#\d+|#x[0-9A-Fa-f]+|[A-Za-z]+);")
_GLUE = frozenset("\u200d\ufe0e\ufe0f")  # zero-width joiner and variation selectors bind to their neighbours
_OPEN_FENCE = _FENCE + "\n"
_CLOSE_FENCE = "\n" + _FENCE


@dataclass(frozen=True)
class _Block:
    """A code block as Slack pairs its fences; ``first``/``last`` bound the non-blank content."""

    start: int
    end: int
    first: int
    last: int


@dataclass(frozen=True)
class _Cut:
    end: int  # where this chunk's text stops
    next: int  # where the next chunk's text starts
    inside: bool  # the cut falls inside a code block: close it here, reopen it next


def split_message(text: str, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Cuts mrkdwn into chunks of at most ``limit`` characters that each render on their own.

    A cut prefers a paragraph break, then a line break, then a space, and only then the
    middle of a word; it never falls inside a ``<...>`` token or an ``&amp;`` entity. A code
    block that is cut is closed at the end of the chunk and reopened at the start of the next.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters, got {limit}")
    text = _strip_blank_lines(text)
    if not text:
        return []
    layout = _Layout(text)
    chunks: list[str] = []
    start, reopen = 0, False
    while True:
        prefix = _OPEN_FENCE if reopen else ""
        indentation = len(text) - len(text[start:].lstrip()) - start
        if indentation > limit // 2:
            start += indentation  # whitespace that would crowd out the content is trimmed like any at a split
        if len(prefix) + len(text) - start <= limit:
            chunks.append(prefix + text[start:])
            return chunks
        cut = layout.cut(start, limit - len(prefix))
        suffix = _CLOSE_FENCE if cut.inside else ""
        chunks.append(prefix + text[start : cut.end] + suffix)
        start, reopen = cut.next, cut.inside


def _strip_blank_lines(text: str) -> str:
    """Drops leading blank lines (keeping the first line's indentation) and trailing whitespace."""
    text = text.rstrip()
    return text[text.rfind("\n", 0, len(text) - len(text.lstrip())) + 1 :]


class _Layout:
    """Where ``text`` may be cut, and at what cost in fences, computed once for the whole text."""

    def __init__(self, text: str) -> None:
        self.text = text
        n = len(text)
        self.blocks = _code_blocks(text)
        self.block_starts = [block.start for block in self.blocks]
        self.breakable = bytearray(b"\x01") * (n + 1)
        for match in _ATOMIC.finditer(text):
            if match.group(0).startswith("<") and self._block_at(match.start()):
                continue  # "<" in code is not escaped, so it does not start a token there
            self.breakable[match.start() + 1 : match.end()] = bytes(match.end() - match.start() - 1)
        for block in self.blocks:
            # Never between a fence and the block's first content, nor before a closing fence with nothing left.
            self.breakable[block.start + 1 : block.first + 1] = bytes(block.first - block.start)
            self.breakable[block.last : block.end] = bytes(block.end - block.last)
        for i in range(1, n):
            if text[i] in _GLUE or text[i - 1] == "\u200d" or unicodedata.combining(text[i]):
                self.breakable[i] = 0
        self.levels: list[list[tuple[int, int]]] = [[], [], []]  # paragraph, line, space
        for run in _WHITESPACE_RUN.finditer(text):
            newlines = run.group(0).count("\n")
            after_newline = text.rfind("\n", run.start(), run.end()) + 1 if newlines else run.end()
            level = 0 if newlines >= 2 else 1 if newlines == 1 else 2
            self.levels[level].append((run.start(), after_newline))

    def _block_at(self, position: int) -> _Block | None:
        index = bisect.bisect_right(self.block_starts, position) - 1
        if index >= 0 and position < self.blocks[index].end:
            return self.blocks[index]
        return None

    def _cut_at(self, end: int, next_start: int) -> _Cut | None:
        if not (self.breakable[end] and self.breakable[next_start]):
            return None
        block = self._block_at(end)
        return _Cut(end, next_start, inside=block is not None and block.start < end)

    def cut(self, start: int, room: int) -> _Cut:
        """The best cut after ``start`` that leaves at most ``room`` characters, closing fence included."""
        text = self.text
        content = len(text) - len(text[start:].lstrip())  # a chunk must hold more than whitespace

        def fits(cut: _Cut) -> bool:
            return cut.end > content and cut.end - start + (len(_CLOSE_FENCE) if cut.inside else 0) <= room

        for candidates in self.levels:
            for index in range(bisect.bisect_right(candidates, (start + room, len(text))) - 1, -1, -1):
                end, next_start = candidates[index]
                if end <= content:
                    break
                cut = self._cut_at(end, next_start)
                if cut is not None and fits(cut):
                    return cut
        for position in range(min(start + room, len(text) - 1), content, -1):
            cut = self._cut_at(position, position)
            if cut is not None and fits(cut):
                return cut
        # One token longer than a whole message: cutting it is the only way to respect the limit.
        end = start + room - len(_CLOSE_FENCE)
        block = self._block_at(end)
        return _Cut(end, end, inside=block is not None and block.start < end)


def _code_blocks(text: str) -> list[_Block]:
    """Code blocks as Slack sees them: fences paired in order; an unpaired last fence runs to the end."""
    markers = [match.start() for match in re.finditer(re.escape(_FENCE), text)]
    blocks = []
    for i in range(0, len(markers), 2):
        start = markers[i]
        end = markers[i + 1] + len(_FENCE) if i + 1 < len(markers) else len(text)
        body_end = markers[i + 1] if i + 1 < len(markers) else len(text)
        body_start = start + len(_FENCE)
        line_end = text.find("\n", body_start, body_end)
        if line_end >= 0 and not text[body_start:line_end].strip():
            body_start = line_end + 1  # the fence's own line break is not content
        body = text[body_start:body_end]
        first = body_start + len(body) - len(body.lstrip())
        last = body_start + len(body.rstrip())
        blocks.append(_Block(start, end, first, max(first, last)))
    return blocks

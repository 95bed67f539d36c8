"""Gemini's Markdown turned into Slack mrkdwn, for where Slack's ``markdown`` block cannot carry it.

An answer or a progress update is posted as a ``markdown`` block, which Slack renders itself; this converter writes
the ``text`` of those messages: what notifications, screen readers and clients without the block show, and what
stays when a post's blocks are replaced. Gemini answers in GitHub-flavoured Markdown; Slack's ``text`` field
speaks mrkdwn, a different dialect (``*bold*``, ``_italic_``, ``<url|label>``, no headings or tables) in which
``&``, ``<`` and ``>`` are control characters. The conversion works line by line for blocks (fences, tables,
headings, lists, quotes) and with CommonMark's delimiter-run rules for emphasis (``shared.slack.mrkdwn_inline``),
so that ``snake_case`` and ``2 * 3`` stay as written.
"""

from __future__ import annotations

import re
import unicodedata

from shared.slack.mrkdwn_inline import HEADING_STYLE, PLAIN_STYLE, SLACK_STYLE, inline

__all__ = ["to_mrkdwn"]

_FENCE = "```"
_RULE = "———"
_BULLET = "•"

_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HR = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_QUOTE = re.compile(r"^ {0,3}(?:>[ \t]?)+(.*)$")
_BULLET_ITEM = re.compile(r"^([ \t]*)[-*+][ \t]+(?:\[([ xX])\][ \t]+)?(.*)$")
_ORDERED_ITEM = re.compile(r"^([ \t]*)(\d{1,9}[.)])[ \t]+(.*)$")
_TABLE_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


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
        title = inline(heading.group(2) or "", HEADING_STYLE).strip()
        return f"*{title}*" if title else ""
    if quote := _QUOTE.match(line):
        # Slack has no nested quotes, and a line starting ">>>" would quote the rest of the message.
        body = _block_line(quote.group(1))
        return f"> {body}" if body else ">"
    if item := _BULLET_ITEM.match(line):
        indent, box, text = item.groups()
        check = "" if box is None else ("☐ " if box == " " else "☑ ")
        return f"{indent}{_BULLET} {check}{inline(text, SLACK_STYLE)}"
    if item := _ORDERED_ITEM.match(line):
        indent, number, text = item.groups()
        return f"{indent}{number} {inline(text, SLACK_STYLE)}"
    return inline(line, SLACK_STYLE)


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
    header = [inline(cell, PLAIN_STYLE) for cell in _cells(lines[start])]
    aligns = [_alignment(cell) for cell in _cells(lines[start + 1])]
    rows = [header]
    i = start + 2
    while i < len(lines) and lines[i].strip() and "|" in lines[i] and not _FENCE_OPEN.match(lines[i]):
        cells = [inline(cell, PLAIN_STYLE) for cell in _cells(lines[i])][: len(header)]
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

"""Cutting a long answer into Slack messages that each render whole.

A message's markdown blocks hold at most 12,000 characters together (and its text is truncated beyond 40,000), so
a long answer goes out as several messages; each chunk must render on its own, which is why a code block cut in
two is closed and reopened. The text is the model's Markdown (what the answer's markdown blocks carry) or mrkdwn:
both fence code with three backticks and write Slack's tokens (``<https://…>``, ``<@U…>``) and entities alike.
A fence with a language (a Markdown code block's info string) keeps it in its first chunk only.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

DEFAULT_LIMIT = 3500
MIN_LIMIT = 100

_FENCE = "```"

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
    """Cuts Markdown or mrkdwn into chunks of at most ``limit`` characters that each render on their own.

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

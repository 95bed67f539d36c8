"""HTML to readable text, in time linear in the size of the page, whatever the page is.

The standard library's ``html.parser`` is quadratic on some inputs (``"<a " * 20_000``, a tag
that never ends, is re-scanned from its start each time more input is looked at: seconds at
16 kB, most of a minute at 64 kB), and pages come from anyone. So this is a small scanner of
its own, which only needs what the model is shown: the text, the tags that break lines, and
the elements whose content is not text. Every step either moves past what it has looked at
or, when a search for the end of a comment, tag or script fails, ends the scan (the rest of
the page is inside that construct, as an HTML parser would also conclude). So each character
is looked at a bounded number of times, and nothing here backtracks.

What it keeps: text, with character references decoded by ``html.unescape`` and whitespace
collapsed; a line break at each start and end tag of a block element (``p``, ``li``, ``br``,
``h1``, ``title``...). What it drops: comments, doctypes and processing instructions; tags and
their attributes (a ``>`` inside a quoted attribute value does not end a tag); the content of
``script`` and ``style`` (raw text, up to their end tag) and of ``noscript``, ``template`` and
``svg`` (parsed, so they may nest). The callers also cap the input (``LIMIT``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

LIMIT = 512 * 1024
"""At most this many characters of a page are converted (the fetcher's default download cap)."""

_SKIP = frozenset({"noscript", "template", "svg"})  # not "head": pages may omit </head>, and its title is worth keeping
_RAW = frozenset({"script", "style"})
_BLOCK = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "footer", "form",
     "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section",
     "table", "td", "th", "title", "tr", "ul"}
)  # fmt: skip

# Where markup starts; a "<" followed by anything else (a space, a digit, another "<") is text.
_MARKUP = re.compile(r"<[a-zA-Z!?/]")
_TAG_NAME = re.compile(r"[a-zA-Z][^\s/>]*")
# Inside a tag: its end, or the start of a quoted attribute value (a quote counts only right after "=").
_IN_TAG = re.compile(r""">|=\s*["']""")
_RAW_END = {name: re.compile(rf"</{name}(?=[\s/>]|\Z)", re.IGNORECASE) for name in _RAW}
_WHITESPACE = re.compile(r"\s+")

_TEXT, _START, _END = "text", "start", "end"


def html_to_text(page: str) -> str:
    """Readable text of an HTML page: the title and visible text, one block per line, whitespace collapsed."""
    parts: list[str] = []
    skipping = 0
    for kind, value in _tokens(page):
        if kind == _TEXT:
            if not skipping:
                parts.append(_WHITESPACE.sub(" ", html.unescape(value)))  # line breaks come from block tags only
            continue
        if value in _SKIP:
            skipping = skipping + 1 if kind == _START else max(0, skipping - 1)
        if value in _BLOCK:
            parts.append("\n")
    lines = (" ".join(line.split()) for line in "".join(parts).splitlines())
    return "\n".join(line for line in lines if line)


def looks_like_html(content_type: str, text: str) -> bool:
    if content_type in ("text/html", "application/xhtml+xml"):
        return True
    return not content_type and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))


def _tokens(page: str) -> Iterator[tuple[str, str]]:
    """(``text``, the text) and (``start`` or ``end``, the tag name in lower case), in order.

    A self-closing tag is a start and an end. Nothing is yielded after a construct that the page never closes.
    """
    pos = 0
    while (markup := _MARKUP.search(page, pos)) is not None:
        lt = markup.start()
        if lt > pos:
            yield _TEXT, page[pos:lt]
        closing = page[lt + 1] == "/"
        name = _TAG_NAME.match(page, lt + 2 if closing else lt + 1)
        if name is None:
            pos = _declaration_end(page, lt)
        else:
            tag = name.group().lower()
            pos = _tag_end(page, name.end())
            if pos != -1:
                yield (_END if closing else _START), tag
                if not closing and page[pos - 2] == "/":
                    yield _END, tag
                elif not closing and tag in _RAW:
                    raw_end = _RAW_END[tag].search(page, pos)
                    pos = -1 if raw_end is None else raw_end.start()
        if pos == -1:
            return  # the page ends inside a comment, a tag or a script: nothing more to show
    if pos < len(page):
        yield _TEXT, page[pos:]


def _declaration_end(page: str, lt: int) -> int:
    """Past the end of a comment, a doctype or CDATA, a processing instruction, or "</" and no name; -1 if none."""
    if page.startswith("<!--", lt):
        stop = page.find("-->", lt + 2)
        return -1 if stop == -1 else stop + 3
    stop = page.find(">", lt + 2)
    return -1 if stop == -1 else stop + 1


def _tag_end(page: str, pos: int) -> int:
    """The index just past the ``>`` that ends a tag whose attributes start at ``pos``; -1 if the page ends first."""
    while True:
        found = _IN_TAG.search(page, pos)
        if found is None:
            return -1
        if found.group() == ">":
            return found.end()
        quote = found.group()[-1]
        close = page.find(quote, found.end())
        if close == -1:
            return -1
        pos = close + 1

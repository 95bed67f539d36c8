"""Figure 6: HTML to text for ``fetch_url``, on ordinary pages and on hostile ones, in this process.

How it is measured and read: ``bench/sections/html_text.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

from bench import figures
from bench.figures import Figure, Section, at_most, info, median, table
from bench.harness import Bench, clocked
from shared.agent.tools.fetch import text

RUNS = 3
SIZES = {"64kb": 64 * 1024, "1mb": 1024 * 1024}
LIMIT_MS = 1000.0  # a 1 MB page, ordinary or hostile, is converted within a second

ORDINARY_UNIT = (
    '<div class="post"><h2><a href="/post?id=1&amp;ref=feed" title="a &gt; b">A title &amp; more</a></h2>'
    "<p>Some <b>bold</b> text, <i>italics</i> and a <a href='https://example.com/x'>link</a>. &copy; 2024 "
    "&mdash; more words to fill the line.</p><ul><li>one</li><li>two</li></ul>"
    "<script>var shown = 1 < 2;</script><style>.post { margin: 0 }</style></div>\n"
)
HOSTILE_UNITS = {
    "unclosed tags": "<a ",
    "unclosed quoted values": "<a b='",
    "valueless attributes": "<a x=",
    "unclosed comments": "<!--",
    "lone brackets": "<",
    "many block tags": "<p>",
    "unclosed scripts": "<script>",
}
OLD_HOSTILE_SIZES = {"4kb": 4 * 1024, "8kb": 8 * 1024}
_WHITESPACE = re.compile(r"\s+")


class _OldExtractor(HTMLParser):
    """The converter ``text.html_to_text`` replaced, as it was, for the comparison."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK = frozenset(
        {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "footer", "form",
         "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section",
         "table", "td", "th", "title", "tr", "ul"}
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(_WHITESPACE.sub(" ", data))


def old_html_to_text(page: str) -> str:
    parser = _OldExtractor()
    parser.feed(page)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def page_of(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def timed_ms(convert: Callable[[str], str], page: str) -> float:
    return median(clocked(lambda: convert(page), RUNS))


def run(_bench: Bench) -> Section:
    section = Section("6. HTML to text")
    rows: list[tuple[str, str, float, float | None]] = []
    for size_name, size in SIZES.items():
        ordinary = page_of(ORDINARY_UNIT, size)
        new_ms, old_ms = timed_ms(text.html_to_text, ordinary), timed_ms(old_html_to_text, ordinary)
        rows.append(("ordinary", size_name, new_ms, old_ms))
        section.add(
            _targeted(f"html_text_ordinary_{size_name}_ms", new_ms, size_name),
            info(f"html_parser_ordinary_{size_name}_ms", old_ms, "ms"),
        )
        hostile = {shape: timed_ms(text.html_to_text, page_of(unit, size)) for shape, unit in HOSTILE_UNITS.items()}
        rows += [(shape, size_name, ms, None) for shape, ms in hostile.items()]
        worst = max(hostile.values())
        section.add(_targeted(f"html_text_hostile_{size_name}_ms", worst, size_name))
    old_hostile: dict[str, float] = {}
    for size_name, size in OLD_HOSTILE_SIZES.items():
        page = page_of(HOSTILE_UNITS["unclosed tags"], size)
        old_hostile[size_name] = timed_ms(old_html_to_text, page)
        rows.append(("unclosed tags", size_name, timed_ms(text.html_to_text, page), old_hostile[size_name]))
        section.add(info(f"html_parser_unclosed_tags_{size_name}_ms", old_hostile[size_name], "ms"))
    section.add(info("html_parser_unclosed_tags_8kb_over_4kb", old_hostile["8kb"] / old_hostile["4kb"], "ratio"))
    section.say(
        *figures.text("html_text"),
        table(["page", "size", "html_to_text (ms)", "html.parser (ms)"], rows),
    )
    return section


def _targeted(name: str, ms: float, size_name: str) -> Figure:
    """The 1 MB figures have the target; the 64 kB ones are context."""
    return at_most(name, ms, "ms", LIMIT_MS) if size_name == "1mb" else info(name, ms, "ms")

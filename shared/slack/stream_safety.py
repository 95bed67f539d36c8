"""Where a streamed answer may be cut: no broadcast or user-group token, and no link, may form across two appends.

Slack assembles a streamed message from every ``markdown_text`` piece appended to it, so a token split over two
pieces (``<!chan`` then ``nel>``, a ``<!channel|…>`` whose label is longer than any fixed look-back, ``&l`` then
``t;!here&gt;``) passes a check on each piece and still pings. The rule that makes the whole safe: every piece is
neutralised (``neutralise_markdown``), and the message never ends, between two appends, in the unfinished beginning
of a token (``safe_cut``): the text after the cut waits for the next piece, where it is neutralised with what
follows it. Where the message must end there (a turn's last piece), that beginning is made inert instead (``inert``:
a zero-width space after its opening character). Both look at the text as written and as its character references
decode, as ``neutralise_markdown`` does.

A link is held the same way (``[label`` until its ``](url)`` is closed, ``<url|label`` until its ``>``), so
``neutralise_markdown`` sees it whole and can show its host in its label; one made inert gets a backslash before
its ``[`` (Markdown then reads the bracket as text).

Why that suffices: a token in the assembled message either lies inside one piece (which was neutralised until
nothing changed) or starts before a cut and ends after it; then the text from its start to the cut was the
unfinished beginning of a token when the cut was made, which ``safe_cut`` never allows.
"""

from __future__ import annotations

import re

from shared.slack.links import unfinished_links
from shared.slack.safety import NAMES, PLAIN_NAMES, decoded

_ZWSP = "\u200b"
_ESCAPE = "\\"  # before a "[", it opens no link
_PARTIAL_REFERENCE = re.compile(r"&[#\w]*")  # a character reference still being written ("&", "&l", "&#6", "&lt")
_LINK_URL = re.compile(r"<(?!\u200b)[^\s<>|]*")  # "<" and what may be a mrkdwn link's URL ("<url|label>")
_WORD = re.compile(r"\w")


def _extent(view: str, q: int, stops: list[int]) -> int:
    """The furthest ``c`` for which ``view[q:c]`` is the unfinished beginning of a token (``q`` if none): a
    ``<`` then ``!`` and a name (``here``, ``channel``, …) then a label up to the character that closes it or rules
    it out (``stops[i]``: where the first such character from ``i`` on is), or an ``@`` then part of ``here`` /
    ``channel`` / ``everyone`` ("@channel" whole is a token, quieted in its piece, not an unfinished one)."""
    if view[q] == "@":
        return q + 1 + max(min(_common(view, q + 1, name), len(name) - 1) for name in PLAIN_NAMES)
    if view[q] != "<":
        return q
    if q + 1 == len(view) or view[q + 1] != "!":  # a link "<url|label>": its label up to what closes it
        url = _LINK_URL.match(view, q)
        if url is None:  # made inert
            return q + 1
        return len(view) if url.end() == len(view) else stops[url.end()] if view[url.end()] == "|" else q + 1
    at = best = q + 2
    for name in NAMES:
        common = _common(view, at, name)
        after = at + common
        if common < len(name) or (after < len(view) and _WORD.match(view[after])):
            best = max(best, after)  # "<!chan", or "<!here" of "<!herex"
        else:
            best = max(best, stops[after])  # "<!here|a label": up to the ">" (or "<") after it
    return best


def _common(view: str, at: int, name: str) -> int:
    """How many characters of ``name`` ``view`` holds from ``at`` (case-insensitively)."""
    n = 0
    while n < len(name) and at + n < len(view) and view[at + n].lower() == name[n]:
        n += 1
    return n


def _stops(view: str, chars: str) -> list[int]:
    """For each index, the first index from it on holding one of ``chars`` (``len(view)`` if none)."""
    stops = [len(view)] * (len(view) + 1)
    for i in range(len(view) - 1, -1, -1):
        stops[i] = i if view[i] in chars else stops[i + 1]
    return stops


def _openings(text: str) -> list[tuple[int, int, int, str]]:
    """Every place in ``text`` where a token or a link could begin: (where it is written, where a mark makes it
    inert, the furthest cut that ends in its unfinished beginning, the mark: a zero-width space after a token's
    opening character, a backslash before a link's "["); ``text[:c]`` ends in it for start < c <= end."""
    found: list[tuple[int, int, int, str]] = []
    stops = _stops(text, "<>")  # the text as written: mrkdwn reads tokens here (its labels may span lines)
    for i, char in enumerate(text):
        if char in "<@":
            found.append((i, i + 1, _extent(text, i, stops), _ZWSP))
        elif char == "&":
            partial = _PARTIAL_REFERENCE.match(text, i)
            assert partial is not None
            found.append((i, i + 1, partial.end(), _ZWSP))  # "&lt" may still become "&lt;": held while it is written
    found += [(i, i, len(text), _ESCAPE) for i in unfinished_links(text)]  # "[label](url" waits for its ")"
    plain, spans = decoded(text)
    if plain != text:  # as Markdown reads it, references decoded (a label ends at a line's end there)
        stops = _stops(plain, "<>\n")
        for j, char in enumerate(plain):
            if char in "<@":
                extent = _extent(plain, j, stops)
                found.append((spans[j][0], spans[j][1], spans[extent - 1][1] if extent > j else spans[j][0], _ZWSP))
        found += [(spans[j][0], spans[j][0], len(text), _ESCAPE) for j in unfinished_links(plain)]
    return found


def safe_cut(text: str) -> int:
    """The longest start ``text[:c]`` of a neutralised piece that ends in no unfinished token: what may be appended
    now (the rest waits for more text)."""
    cut = len(text)
    for start, _, end, _ in sorted(_openings(text), reverse=True):
        if start < cut <= end:
            cut = start
    return cut


def inert(text: str) -> str:
    """``text`` (neutralised) made safe to end a message's text at: every unfinished token at its end gets a
    zero-width space after its opening character (a link a backslash before its "["), so what the message gets
    next cannot finish it."""
    for _ in range(len(text) + 1):
        ending = {(at, mark) for start, at, end, mark in _openings(text) if start < len(text) <= end}
        if not ending:
            return text
        links = [(at, mark) for at, mark in ending if mark == _ESCAPE]  # every unfinished link's "[" at once
        for at, mark in sorted(links, reverse=True) or [max(ending)]:
            text = text[:at] + mark + text[at:]
    return text

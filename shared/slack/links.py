"""What no bot post may do with a link: show a label that reads like one address while it goes to another.

The model's text, shaped by untrusted input, may write ``[https://sso.corp.example](https://evil.example/login)``
(or ``<https://evil.example/login|sso.corp.example>`` in mrkdwn): Slack shows the label, and the reader clicks a
phishing link. A link whose label names a web address or a host (a scheme, or a dotted name such as
``sso.corp.example``) other than the host it goes to gets that host after its label, inside it:
``[https://sso.corp.example (evil.example)](https://evil.example/login)``. Ordinary labels ("the runbook") and
labels that name the link's own host are left alone, and a label that already ends with its host is not changed
again (so neutralising until nothing changes ends).

The label is judged as a reader sees it: character references decoded, backslash escapes and emphasis markers
gone, invisible characters dropped, compatibility forms folded (a full-width dot is a dot). The host is the one a
browser goes to (the last ``@`` of the authority, a backslash ends it) and is shown in ASCII (punycode), so a
look-alike host never reads like the one it imitates.

These functions look at one view of a text (as written, or as Markdown decodes its references) and say what to
insert where; ``shared.slack.safety`` applies them to every post, and ``shared.slack.stream_safety`` holds back a
link a streamed piece has not finished (``unfinished_links``), so the rewrite sees each link whole.
"""

from __future__ import annotations

import html
import re
import unicodedata
from urllib.parse import quote, unquote

_MRKDWN_LINK = re.compile(r"<([^<>|@#!][^<>|]*)\|([^<>]*)>")  # <url|label>, not a mention or channel
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):", re.IGNORECASE)
_SPECIAL = frozenset({"http", "https", "ftp", "ws", "wss", "file"})  # a browser reads their host without "//"
_LABEL_URL = re.compile(r"[a-z][a-z0-9+.-]*:[/\\]{2}[^/\\?#\s]*", re.IGNORECASE)
_DOTTED = re.compile(r"(?:[^\W_]|-)+(?:\.(?:[^\W_]|-)+)+")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Emphasis markers, and the invisible (format, "Cf") characters: soft hyphen, zero-width and direction controls,
# word joiners, the byte order mark, tags and the rest.
_HIDDEN = re.compile(
    "[*_~`\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
_LONG_LABEL = 500  # a label longer than this is not judged: it is given its link's host (unless it ends with it)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SHOWN_URL = 40  # a URL with no host is shown this far: a label grows by little, however odd its link
_DESTINATION = re.compile(r"\s*(\S{0,2048})")  # a link's URL: its destination's first word (a title may follow)


def mrkdwn_disclosures(view: str) -> list[tuple[int, str]]:
    """For each ``<url|label>`` in ``view`` whose label hides its host: where to insert what shows it."""
    found = []
    for link in _MRKDWN_LINK.finditer(view):
        if add := disclosure(link.group(2), html.unescape(link.group(1))):
            found.append((link.end() - 1, add))
    return found


def markdown_disclosures(view: str) -> list[tuple[int, str]]:
    """For each ``[label](url)`` (or image) in ``view`` whose label hides its host: where to insert what shows it;
    and before each ``[label]:`` a backslash, so no reference definition makes a link elsewhere in the text (one
    could come in a later piece of a stream, after its uses were sent). Brackets are paired as written, escapes
    aside, code spans and all: a link Slack would not make gets at most a host it would not need."""
    found: list[tuple[int, str]] = []
    pairs, _, closes = _structure(view)
    for start, end in pairs:
        after = view[end + 1 : end + 2]
        if after == ":":
            found.append((start, "\\"))
        elif after == "(":
            url = _DESTINATION.match(view, end + 2, closes.get(end + 1, len(view)))
            assert url is not None
            if add := disclosure(view[start + 1 : end], _url(url.group(1))):
                found.append((end, add))
    return found


def unfinished_links(view: str) -> list[int]:
    """Where in ``view`` a ``[`` begins a link that the text after ``view`` could still finish: its label not
    closed, or closed at the very end, or its destination not closed; never across a blank line."""
    blank = [m.start() for m in _BLANK_LINE.finditer(view)]
    last_blank = blank[-1] if blank else -1
    pairs, opened, closes = _structure(view)
    starts = [s for s in opened if s > last_blank]
    for start, end in pairs:
        unclosed = end == len(view) - 1 or (view[end + 1] == "(" and end + 1 not in closes)
        if start > last_blank and unclosed:
            starts.append(start)
    return starts


def _structure(view: str) -> tuple[list[tuple[int, int]], list[int], dict[int, int]]:
    """Each unescaped ``[`` with the ``]`` that closes it, each that none closes, and each ``(`` with the ``)``
    that closes it (a link's destination ends there): one pass, however many brackets."""
    pairs: list[tuple[int, int]] = []
    opened: list[int] = []
    parens: list[int] = []
    closes: dict[int, int] = {}
    i = 0
    while i < len(view):
        char = view[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            opened.append(i)
        elif char == "]" and opened:
            pairs.append((opened.pop(), i))
        elif char == "(":
            parens.append(i)
        elif char == ")" and parens:
            closes[parens.pop()] = i
        i += 1
    return pairs, opened, closes


def _url(destination: str) -> str:
    """A Markdown link destination as the URL it stands for: references decoded, escapes taken out."""
    return _ESCAPE.sub(r"\1", html.unescape(destination)).strip("<>")


def disclosure(label: str, url: str) -> str:
    """What to add at the end of ``label`` so the reader sees where ``url`` goes ("" if the label does not hide
    it)."""
    target = host_of(url)
    shown = f" ({_shown(url, target)})"
    if _visible(label[-8 * len(shown) - 64 :]).endswith(_visible(shown)):
        return ""  # the host is shown already
    if len(label) > _LONG_LABEL:
        return shown
    seen = _visible(label)
    named = {_key(host) for m in _LABEL_URL.finditer(seen) if (host := host_of(m.group())) is not None}
    named |= {_key(m.group()) for m in _DOTTED.finditer(seen) if _is_host(m.group())}
    return "" if not named or (target is not None and named == {_key(target)}) else shown


def host_of(url: str) -> str | None:
    """The host a browser opens for ``url`` (the domain of a ``mailto:``), or None (a relative or opaque URL)."""
    url = re.sub(r"[\t\n\r]", "", url).strip()
    scheme = _SCHEME.match(url)
    if scheme is None:
        if not url.startswith(("//", "\\\\")):
            return None
        rest = url
    else:
        rest, name = url[scheme.end() :], scheme.group(1).lower()
        if name == "mailto":
            address = rest.split("?", 1)[0]
            return unquote(address.rpartition("@")[2]) if "@" in address else None
        if name not in _SPECIAL and not rest.startswith("//"):
            return None
    authority = re.split(r"[/\\?#]", rest.lstrip("/\\"), maxsplit=1)[0].rpartition("@")[2]
    host = authority if authority.startswith("[") else authority.rsplit(":", 1)[0]
    return unquote(host)


def _visible(text: str) -> str:
    """``text`` as a reader compares it: references decoded, escapes and emphasis markers gone, invisible
    characters dropped, compatibility forms folded, one case."""
    text = _ESCAPE.sub(r"\1", html.unescape(text))
    text = _HIDDEN.sub("", text)
    return unicodedata.normalize("NFKC", text).casefold().replace("\u3002", ".")


def _is_host(name: str) -> bool:
    """Whether a dotted name reads like a host: its last part a top-level domain's letters, or four numbers."""
    parts = name.split(".")
    return (len(parts[-1]) >= 2 and parts[-1].isalpha()) or (len(parts) == 4 and all(p.isdigit() for p in parts))


def _key(host: str) -> str:
    host = _visible(host).rstrip(".")
    return host[4:] if host.startswith("www.") else host


def _shown(url: str, host: str | None) -> str:
    """The target as a label may show it: the host in ASCII (punycode), else the URL (shortened); no character
    that Markdown or mrkdwn would read as markup."""
    if host is None:
        shown = quote(url, safe=":/.-?=%,;+")
        return shown if len(shown) <= _SHOWN_URL else shown[:_SHOWN_URL] + "…"
    try:
        ascii_host = host.rstrip(".").encode("idna").decode("ascii")
    except UnicodeError:
        ascii_host = host
    return quote(ascii_host.lower(), safe=".-:")

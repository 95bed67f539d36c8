"""A GET-only URL fetcher the model may call with URLs taken from untrusted Slack text.

The danger is server-side request forgery: a thread that says "summarise
http://169.254.169.254/computeMetadata/v1/..." must not get the function's
credentials read back to it, and neither may a public name that resolves to
10.x, a redirect that points inward, or a DNS answer that changes between the
check and the connection. So every hop is vetted and then pinned:

1. The URL is parsed strictly: http or https, a host, no ``user:pass@``. IP
   literals are normalised first, including the spellings ``inet_aton`` accepts
   (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``), so an odd spelling
   cannot slip past the range checks.
2. The host is resolved once, and the request is refused if *any* address is
   not publicly routable (private, unique-local, loopback, link-local,
   multicast, reserved, unspecified, shared 100.64/10, or such an address
   embedded in IPv4-mapped, 6to4 or NAT64 IPv6) or is a metadata endpoint.
   Metadata and local host names are refused by name before any lookup.
3. The connection is pinned to a vetted address. A urllib3 connection pool is
   created for the IP itself, so nothing resolves the name a second time and a
   rebinding DNS server has nothing to rebind. The original name still goes
   where the server needs it: in the ``Host`` header and, for https, as
   ``server_hostname``, which urllib3 uses both for SNI and for verifying the
   certificate against the name (not the IP) with the system trust store.
   Using urllib3's pools directly keeps this to public arguments; requests
   would need a custom adapter to do the same, and would also pick up proxy
   settings from the environment, which would defeat the pinning.
4. Redirects are never followed by the library. Each ``Location`` is resolved
   against the current URL and goes through steps 1-3 again, up to
   ``max_redirects``.
5. The body is streamed and reading stops after ``max_bytes`` (one more byte is
   read to tell whether there was more). ``timeout`` bounds the connect and each
   read, and an overall deadline of twice ``timeout`` bounds the whole fetch,
   redirects included: each read's socket timeout is cut to what remains of it.
   A server that compresses although asked not to is decompressed here, with the
   same byte limit applied to the decompressed output.

Errors are ``FetchError`` (or ``FetchRefused`` for policy refusals) with short
messages meant to go back to the model as the tool's error. Nothing here logs;
messages name hosts and addresses but never a URL's path or query.
"""

from __future__ import annotations

import contextlib
import email.message
import ipaddress
import re
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import quote, urljoin, urlsplit

import urllib3
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import ConnectTimeoutError, HTTPError, NewConnectionError, SSLError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_DEADLINE_FACTOR = 2
_USER_AGENT = "Mozilla/5.0 (compatible; slack-agent-fetch/1.0)"

_METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal"})
# ``.internal`` is reserved for private use (GCP's internal DNS lives there); ``.localhost`` is always loopback.
_LOCAL_SUFFIXES = (".internal", ".localhost")
_METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")},
)
_SHARED_SPACE = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")

_HOSTNAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_NUMBER_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
# Characters urllib3 must not see percent-encoded twice, as requests' ``requote_uri`` leaves them.
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
_WHITESPACE = re.compile(r"\s+")


class FetchError(Exception):
    """The URL could not be fetched; the message is meant for the model."""


class FetchRefused(FetchError):
    """The URL points somewhere the fetcher will not go."""


@dataclass(frozen=True)
class FetchResult:
    url: str
    """The final URL, after redirects."""
    status: int
    content_type: str
    """The media type, lower case, without parameters; empty if the server sent none."""
    text: str
    truncated: bool
    """True if the body was longer than ``max_bytes`` and only that much was read."""
    bytes_read: int
    """Body bytes kept (after any content decoding), at most ``max_bytes``."""


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str  # ASCII; what goes into SNI and certificate verification
    port: int
    host_header: str
    path: str
    addresses: tuple[Address, ...]


def fetch(
    url: str,
    *,
    max_bytes: int = 512 * 1024,
    timeout: float = 10.0,
    max_redirects: int = 3,
    resolver: Resolver | None = None,
    allow: Callable[[Address], bool] | None = None,
) -> FetchResult:
    """GET ``url``, refusing anything but public http(s) addresses, on every redirect hop.

    ``resolver`` maps (host, port) to IP strings; the default uses ``socket.getaddrinfo``.
    ``allow`` permits an address the rules would refuse when it returns True. It exists
    only so tests can reach their own loopback server; production code never passes it.
    """
    if max_bytes < 0 or timeout <= 0 or max_redirects < 0:
        raise ValueError("max_bytes and max_redirects must be >= 0 and timeout > 0")
    deadline = time.monotonic() + _DEADLINE_FACTOR * timeout
    current = url
    for _ in range(max_redirects + 1):
        target = _vet(current, resolver or _resolve, allow)
        with _open(target, timeout, deadline) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                current = urljoin(current, location.strip())
                continue
            body, truncated = _read_body(response, max_bytes, timeout, deadline)
            content_type, charset = _parse_content_type(response.headers.get("Content-Type", ""))
            return FetchResult(
                url=current,
                status=response.status,
                content_type=content_type,
                text=_decode(body, charset),
                truncated=truncated,
                bytes_read=len(body),
            )
    raise FetchError(f"too many redirects (more than {max_redirects})")


def describe(result: FetchResult, limit: int = 20_000) -> dict[str, object]:
    """The tool's answer to the model: HTML reduced to readable text, capped at ``limit`` characters.

    ``truncated`` is true if either the download or this cap cut the text short.
    """
    text = _html_to_text(result.text) if _is_html(result) else result.text
    return {
        "url": result.url,
        "status": result.status,
        "content_type": result.content_type,
        "truncated": result.truncated or len(text) > limit,
        "text": text[:limit],
    }


# --- vetting -------------------------------------------------------------------------------------------------


def _vet(url: str, resolve: Resolver, allow: Callable[[Address], bool] | None) -> _Target:
    """Parse ``url`` and resolve its host; raise unless every address it may reach is acceptable."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise FetchRefused("refusing URL: it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchRefused(f"refusing URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise FetchRefused(f"refusing URL: scheme {scheme or '(none)'!r} is not http or https")
    if "@" in parts.netloc:
        raise FetchRefused("refusing URL: credentials in URLs are not allowed")
    if not parts.hostname:
        raise FetchRefused("refusing URL: it has no host")
    if port == 0:
        raise FetchRefused("refusing URL: port 0")
    port = port or _DEFAULT_PORTS[scheme]

    literal = _ip_literal(parts.hostname)
    if literal is not None:
        _check(parts.hostname, literal, allow)
        host = str(literal)
        addresses: tuple[Address, ...] = (literal,)
    else:
        host = _ascii_host(parts.hostname)
        addresses = _lookup(host, port, resolve)
        for address in addresses:
            _check(host, address, allow)

    shown = f"[{host}]" if isinstance(literal, ipaddress.IPv6Address) else host
    path = quote(parts.path or "/", safe=_URL_SAFE) + (f"?{quote(parts.query, safe=_URL_SAFE)}" if parts.query else "")
    return _Target(
        scheme=scheme,
        host=host,
        port=port,
        host_header=shown if port == _DEFAULT_PORTS[scheme] else f"{shown}:{port}",
        path=path,
        addresses=addresses,
    )


def _ip_literal(hostname: str) -> Address | None:
    """The address a host names literally, in any spelling ``inet_aton`` accepts; None for a host name."""
    host = hostname.lower().rstrip(".")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if ":" in host:
        raise FetchRefused(f"refusing {hostname}: not a valid IPv6 address")
    # As in the WHATWG URL standard: a host whose last label is a number is an IPv4 address or invalid.
    if _NUMBER_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            raise FetchRefused(f"refusing {hostname}: not a valid IPv4 address") from None
    return None


def _ascii_host(hostname: str) -> str:
    host = hostname.lower().rstrip(".")
    try:
        host = host if host.isascii() else host.encode("idna").decode("ascii")
    except UnicodeError:
        raise FetchRefused(f"refusing {hostname}: not a valid host name") from None
    if len(host) > 253 or not _HOSTNAME.fullmatch(host):
        raise FetchRefused(f"refusing {hostname}: not a valid host name")
    if host in _METADATA_HOSTS:
        raise FetchRefused(f"refusing {host}: metadata endpoint")
    if host == "localhost" or host.endswith(_LOCAL_SUFFIXES):
        raise FetchRefused(f"refusing {host}: local host name")
    return host


def _resolve(host: str, port: int) -> list[str]:
    """Every address, IPv4 and IPv6, that ``host`` resolves to."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _lookup(host: str, port: int, resolve: Resolver) -> tuple[Address, ...]:
    try:
        found = resolve(host, port)
    except (OSError, UnicodeError):
        raise FetchError(f"could not resolve {host}") from None
    addresses: list[Address] = []
    for text in found:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise FetchRefused(f"refusing {host}: resolver returned {text!r}, not an address") from None
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchError(f"could not resolve {host}")
    return tuple(addresses)


def _check(host: str, address: Address, allow: Callable[[Address], bool] | None) -> None:
    if allow is not None and allow(address):
        return
    reason = _why_refused(address)
    if reason is not None:
        shown = host if host == str(address) else f"{host} ({address})"
        raise FetchRefused(f"refusing {shown}: {reason}")


def _why_refused(address: Address) -> str | None:
    """Why ``address`` is not a public destination, or None if it is."""
    if address in _METADATA_ADDRESSES:
        return "metadata endpoint"
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "scoped address"
        if address.teredo is not None or address in _NAT64_LOCAL:
            return "tunnelled address"
        # Judge an embedded IPv4 address by itself: it is where the packet ends up, and the wrappers' own
        # classification varies between Python patch releases.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return _why_refused(embedded)
    return next((reason for reason, applies in _KINDS if applies(address)), None)


# In order: the first that applies names the refusal.
_KINDS: tuple[tuple[str, Callable[[Address], bool]], ...] = (
    ("loopback address", lambda a: a.is_loopback),
    ("link-local address", lambda a: a.is_link_local),
    ("unspecified address", lambda a: a.is_unspecified),
    ("multicast address", lambda a: a.is_multicast),
    ("shared address space", lambda a: a in _SHARED_SPACE),
    ("site-local address", lambda a: isinstance(a, ipaddress.IPv6Address) and a.is_site_local),
    ("reserved address", lambda a: a.is_reserved),
    ("private address", lambda a: a.is_private),
    ("non-public address", lambda a: not a.is_global),
)


# --- the exchange ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _open(target: _Target, timeout: float, deadline: float) -> Iterator[BaseHTTPResponse]:
    """Send the GET to the first vetted address that accepts a connection; yield the unread response."""
    last: Exception | None = None
    for address in target.addresses:
        pool = _pool(target, address)
        try:
            with _translated_errors():
                try:
                    response = pool.urlopen(
                        "GET",
                        target.path,
                        headers={
                            "Host": target.host_header,
                            "User-Agent": _USER_AGENT,
                            "Accept": "text/html, text/plain;q=0.9, */*;q=0.5",
                            "Accept-Encoding": "identity",
                        },
                        redirect=False,
                        retries=False,
                        preload_content=False,
                        decode_content=False,
                        timeout=_per_call(timeout, deadline),
                    )
                except ConnectTimeoutError as exc:  # also NewConnectionError: try the next address
                    last = exc
                    continue
                try:
                    yield response
                finally:
                    response.close()
                return
        finally:
            pool.close()
    assert last is not None
    with _translated_errors():
        raise last


def _pool(target: _Target, address: Address) -> urllib3.HTTPConnectionPool:
    """A one-connection pool for ``address``: urllib3 connects to the IP and never resolves the name."""
    if target.scheme == "https":
        return urllib3.HTTPSConnectionPool(
            str(address),
            target.port,
            maxsize=1,
            cert_reqs="CERT_REQUIRED",
            # SNI and certificate verification use the name the URL gave, not the IP connected to.
            server_hostname=target.host,
        )
    return urllib3.HTTPConnectionPool(str(address), target.port, maxsize=1)


def _per_call(timeout: float, deadline: float) -> urllib3.Timeout:
    left = min(timeout, _remaining(deadline))
    return urllib3.Timeout(connect=left, read=left)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("timed out")
    return left


@contextlib.contextmanager
def _translated_errors() -> Iterator[None]:
    try:
        yield
    except NewConnectionError as exc:
        raise FetchError(_short(f"HTTP connection failed: {exc.__cause__ or exc}")) from None
    except Urllib3Timeout:
        raise FetchError("timed out") from None
    except SSLError as exc:
        raise FetchError(_short(f"TLS failed: {exc.__cause__ or exc}")) from None
    except (HTTPError, OSError) as exc:
        raise FetchError(_short(f"HTTP connection failed: {exc}")) from None
    except zlib.error:
        raise FetchError("could not decompress the response body") from None


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def _read_body(response: BaseHTTPResponse, max_bytes: int, timeout: float, deadline: float) -> tuple[bytes, bool]:
    """Up to ``max_bytes`` of the (decoded) body, and whether there was more; never holds more than one extra byte."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)  # accepts a gzip or zlib header
    else:
        raise FetchError(f"unsupported content encoding {encoding!r}")
    limit = max_bytes + 1
    body = bytearray()
    with _translated_errors():
        while len(body) < limit:
            if decoder is not None and decoder.unconsumed_tail:
                body += decoder.decompress(decoder.unconsumed_tail, limit - len(body))
                continue
            # Cut this read's socket timeout to what is left of the deadline, so a drip-feeding server
            # cannot stretch the fetch past it.
            left = min(timeout, _remaining(deadline))
            sock = getattr(response.connection, "sock", None)
            if isinstance(sock, socket.socket):
                sock.settimeout(left)
            chunk = response.read1(min(_CHUNK, limit - len(body)), decode_content=False)
            if not chunk:
                break
            body += chunk if decoder is None else decoder.decompress(chunk, limit - len(body))
    if len(body) > max_bytes:
        return bytes(body[:max_bytes]), True
    return bytes(body), False


def _parse_content_type(value: str) -> tuple[str, str | None]:
    """The media type and charset of a Content-Type header, both lower case."""
    if not value.strip():
        return "", None
    message = email.message.Message()
    message["Content-Type"] = value
    return message.get_content_type(), message.get_content_charset()


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:  # unknown, or not a text encoding
            pass
    return body.decode("utf-8", errors="replace")


# --- HTML to text ----------------------------------------------------------------------------------------------


def _is_html(result: FetchResult) -> bool:
    if result.content_type in ("text/html", "application/xhtml+xml"):
        return True
    return not result.content_type and result.text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))


class _TextExtractor(HTMLParser):
    # Not "head": pages may omit </head>, and the only text in a head is the title, which is worth keeping.
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
            self.parts.append(_WHITESPACE.sub(" ", data))  # line breaks come from block tags only


def _html_to_text(html: str) -> str:
    """Readable text of an HTML page: the title and visible text, one block per line, whitespace collapsed."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)

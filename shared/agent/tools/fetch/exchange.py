"""One HTTP GET to a vetted target: connect to one of its addresses, TLS against the name, status, headers, body.

The connection is made here, with the standard library, to an IP ``vet.target`` judged: nothing
resolves the name a second time, so a rebinding DNS server has nothing to rebind. The name
goes where the server needs it: in ``Host`` and, for https, as ``server_hostname``, which
``ssl`` uses for SNI and for verifying the certificate against the name (not the IP) with the
system trust store. No proxy settings are read from the environment, which would defeat the
pinning. The socket is watched by the fetch's ``Deadline`` from the moment it is connected.
"""

from __future__ import annotations

import codecs
import contextlib
import email.message
import http.client
import socket
import ssl
import zlib
from collections.abc import Iterator

from shared.agent.tools.fetch.deadline import Deadline
from shared.agent.tools.fetch.errors import FetchError
from shared.agent.tools.fetch.vet import Target

_CHUNK = 64 * 1024
_USER_AGENT = "Mozilla/5.0 (compatible; slack-agent-fetch/1.0)"


@contextlib.contextmanager
def get(target: Target, deadline: Deadline) -> Iterator[http.client.HTTPResponse]:
    """Send the GET to the first vetted address that accepts a connection; yield the response, body unread."""
    raw = _connect(target, deadline)
    sock: socket.socket = raw
    connection: http.client.HTTPConnection | None = None
    try:
        with _translated_errors(deadline), deadline.watching(raw):
            connection = http.client.HTTPConnection(target.host, target.port)
            raw.settimeout(deadline.remaining())  # a backstop: the timer ends every read at the deadline
            if target.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(raw, server_hostname=target.host)
            connection.sock = sock  # already connected: http.client will not connect (or resolve) itself
            connection.request(
                "GET",
                target.path,
                headers={
                    "Host": target.host_header,
                    "User-Agent": _USER_AGENT,
                    "Accept": "text/html, text/plain;q=0.9, */*;q=0.5",
                    "Accept-Encoding": "identity",
                    "Connection": "close",
                },
            )
            response = connection.getresponse()
            deadline.check()  # headers cut short by the deadline's timer can look complete
            try:
                yield response
            finally:
                response.close()
    finally:
        if connection is not None:
            connection.close()
        sock.close()
        raw.close()  # a no-op once TLS has taken the descriptor over


def _connect(target: Target, deadline: Deadline) -> socket.socket:
    """A TCP connection to the first of the target's addresses that accepts one, within the deadline."""
    last: OSError | None = None
    for index, address in enumerate(target.addresses):
        # A connect cannot be interrupted by the deadline's timer, so it gets its own timeout: an equal share of
        # what is left for each address still to try, so one that drops packets cannot use up the others' time.
        timeout = deadline.remaining() / (len(target.addresses) - index)
        try:
            return socket.create_connection((str(address), target.port), timeout=timeout)
        except OSError as exc:  # refused, unreachable or timed out: try the next address
            last = exc
    assert last is not None  # vet never returns a target without addresses
    with _translated_errors(deadline):
        raise last


@contextlib.contextmanager
def _translated_errors(deadline: Deadline) -> Iterator[None]:
    """Errors of the exchange as short ``FetchError`` messages; anything at all after the deadline as the deadline."""
    try:
        yield
    except FetchError:
        raise
    except (OSError, http.client.HTTPException, zlib.error) as exc:
        if deadline.expired or isinstance(exc, TimeoutError):
            raise deadline.error() from None
        if isinstance(exc, ssl.SSLError | ssl.CertificateError):
            raise FetchError(_short(f"TLS failed: {exc}")) from None
        if isinstance(exc, http.client.HTTPException):
            raise FetchError(_short(f"bad HTTP response: {type(exc).__name__}: {exc}")) from None
        if isinstance(exc, zlib.error):
            raise FetchError("could not decompress the response body") from None
        raise FetchError(_short(f"HTTP connection failed: {exc}")) from None


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def read_body(response: http.client.HTTPResponse, max_bytes: int, deadline: Deadline) -> tuple[bytes, bool]:
    """Up to ``max_bytes`` of the (decoded) body, and whether there was more; never holds more than one extra byte."""
    encoding = (response.getheader("Content-Encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)  # accepts a gzip or zlib header
    else:
        raise FetchError(f"unsupported content encoding {encoding!r}")
    limit = max_bytes + 1
    body = bytearray()
    with _translated_errors(deadline):
        while len(body) < limit:
            if decoder is not None and decoder.unconsumed_tail:
                body += decoder.decompress(decoder.unconsumed_tail, limit - len(body))
                continue
            chunk = response.read1(min(_CHUNK, limit - len(body)))
            if not chunk:
                # The end of the body, or the deadline's timer shutting the socket down mid-body.
                deadline.check()
                if response.length:  # http.client's count of Content-Length bytes still to come
                    raise FetchError("HTTP connection failed: the server closed the connection before the body ended")
                break
            body += chunk if decoder is None else decoder.decompress(chunk, limit - len(body))
    if len(body) > max_bytes:
        return bytes(body[:max_bytes]), True
    return bytes(body), False


def parse_content_type(value: str) -> tuple[str, str | None]:
    """The media type and charset of a Content-Type header, both lower case."""
    if not value.strip():
        return "", None
    message = email.message.Message()
    message["Content-Type"] = value
    return message.get_content_type(), message.get_content_charset()


# Text codecs no page is written in, which the server must not choose: punycode's decoder takes quadratic time
# (half a megabyte: many seconds of CPU, past the fetch's deadline); idna and undefined fail whatever the text.
_NOT_CHARSETS = frozenset({"punycode", "idna", "undefined"})


def decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            name = codecs.lookup(charset).name
            if name not in _NOT_CHARSETS:
                return body.decode(name, errors="replace")
        except LookupError:  # unknown, or not a text encoding
            pass
    return body.decode("utf-8", errors="replace")

"""Vetting a URL before anything connects: strict parsing, one lookup, and every address judged.

See the package's docstring for the rules. ``target`` returns the ``Target`` the exchange is
pinned to: the addresses that were judged, and the name that goes into ``Host`` and SNI.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from shared.agent.tools.fetch.deadline import Deadline
from shared.agent.tools.fetch.errors import FetchError, FetchRefused

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}

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
# Characters that must not be percent-encoded twice, as requests' ``requote_uri`` leaves them.
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # ASCII; what goes into SNI and certificate verification
    port: int
    host_header: str
    path: str
    addresses: tuple[Address, ...]


def target(url: str, resolve: Resolver, allow: Callable[[Address], bool] | None, deadline: Deadline) -> Target:
    """Parse ``url`` and resolve its host; raise unless every address it may reach is acceptable."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise FetchRefused("refusing URL: it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchRefused(f"refusing URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise FetchRefused(f"refusing URL: scheme {scheme or '(none)'!r} is not http or https")
    if "@" in parts.netloc:
        raise FetchRefused("refusing URL: credentials in URLs are not allowed")
    if not parts.hostname:
        raise FetchRefused("refusing URL: it has no host")
    if port == 0:
        raise FetchRefused("refusing URL: port 0")
    port = port or DEFAULT_PORTS[scheme]

    literal = _ip_literal(parts.hostname)
    if literal is not None:
        _check(parts.hostname, literal, allow)
        host = str(literal)
        addresses: tuple[Address, ...] = (literal,)
    else:
        host = _ascii_host(parts.hostname)
        addresses = _lookup(host, port, resolve, deadline)
        for address in addresses:
            _check(host, address, allow)

    shown = f"[{host}]" if isinstance(literal, ipaddress.IPv6Address) else host
    path = quote(parts.path or "/", safe=_URL_SAFE) + (f"?{quote(parts.query, safe=_URL_SAFE)}" if parts.query else "")
    return Target(
        scheme=scheme,
        host=host,
        port=port,
        host_header=shown if port == DEFAULT_PORTS[scheme] else f"{shown}:{port}",
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


def system_resolver(host: str, port: int) -> list[str]:
    """Every address, IPv4 and IPv6, that ``host`` resolves to."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _lookup(host: str, port: int, resolve: Resolver, deadline: Deadline) -> tuple[Address, ...]:
    try:
        # A lookup cannot be interrupted, so it runs in a thread the fetch waits for only until its deadline.
        found = deadline.call(lambda: resolve(host, port), name="fetch-resolve")
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
    reason = why_refused(address)
    if reason is not None:
        shown = host if host == str(address) else f"{host} ({address})"
        raise FetchRefused(f"refusing {shown}: {reason}")


def why_refused(address: Address) -> str | None:
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
            return why_refused(embedded)
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

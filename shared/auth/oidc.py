"""OIDC verification for the internal entry points (agent_session from Cloud Tasks, sweep from Cloud Scheduler).

Cloud Tasks and Cloud Scheduler sign an ID token as a configured service
account, for an audience (the function URL). google-auth verifies the signature
against Google's certificates (fetched with a short timeout and kept per instance for
their max-age), the expiry and the audience; we also require Google as the issuer and
the token to be for the one service account allowed to call. ``REQUIRE_OIDC=false``
switches this off for local runs, where the emulators send no token.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping

import requests

from shared import config
from shared.errors import ProductError

log = logging.getLogger(__name__)

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"


class Unauthorized(ProductError):
    """No usable token: 401."""


class Forbidden(ProductError):
    """A valid token for someone else: 403."""


ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
CERTS_TIMEOUT_SECONDS = 10
CACHE_SECONDS = (300, 6 * 3600)  # how long fetched certificates are kept: max-age, within these bounds


class _Certs:
    """Google's signing certificates, fetched at most once per max-age per instance (one fetch at a time).

    A failed fetch caches nothing: the next request tries again (and Cloud Tasks retries the 401).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._by_url: dict[str, tuple[float, dict[str, str]]] = {}

    def get(self, url: str) -> dict[str, str]:
        with self._lock:
            cached = self._by_url.get(url)
            if cached is not None and cached[0] > self._clock():
                return cached[1]
            response = requests.get(url, timeout=CERTS_TIMEOUT_SECONDS)
            response.raise_for_status()
            certs = response.json()
            if not isinstance(certs, dict) or not all(isinstance(v, str) for v in certs.values()):
                raise ValueError("the certificates are not a {key id: PEM} object")
            self._by_url[url] = (self._clock() + _max_age(response.headers.get("Cache-Control", "")), certs)
            return certs

    def forget(self) -> None:
        with self._lock:
            self._by_url.clear()


def _max_age(cache_control: str) -> float:
    """Seconds to keep the certificates: the response's max-age, within ``CACHE_SECONDS`` (the floor without one)."""
    match = re.search(r"(?:^|[\s,])max-age\s*=\s*\"?(\d+)", cache_control, re.IGNORECASE)
    low, high = CACHE_SECONDS
    return float(min(max(int(match.group(1)) if match else low, low), high))


CERTS = _Certs()


def verify(
    headers: Mapping[str, str], *, audience: str, service_account: str, certs_url: str = GOOGLE_CERTS_URL
) -> str:
    """Check the bearer ID token; returns the caller's email, or raises Unauthorized / Forbidden.

    The signature against Google's certificates (cached), the expiry, the audience and the issuer; then that the
    token is for the one service account allowed to call.
    """
    from google.auth import jwt

    header = headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    try:
        certs = CERTS.get(certs_url)
    except (requests.RequestException, ValueError) as exc:
        raise Unauthorized(f"could not fetch the signing certificates: {type(exc).__name__}") from exc
    try:
        claims = jwt.decode(token, certs=certs, audience=audience)  # type: ignore[no-untyped-call]
    except Exception as exc:  # google-auth raises ValueError and friends for every invalid token
        raise Unauthorized(f"invalid token: {exc}") from exc
    if claims.get("iss") not in ISSUERS:
        raise Unauthorized(f"token issued by {claims.get('iss')!r}, not Google")
    email = claims.get("email")
    if not claims.get("email_verified") or not service_account or email != service_account:
        raise Forbidden(f"token is for {email!r}, not the configured invoker")
    return str(email)


def check(headers: Mapping[str, str], *, audience: str, service_account: str) -> tuple[dict[str, str], int] | None:
    """None if the request may proceed; otherwise the (body, status) to answer with."""
    if not config.settings().require_oidc:
        return None
    try:
        verify(headers, audience=config.settings().oidc_audience or audience, service_account=service_account)
    except Unauthorized as exc:
        log.warning("rejected internal request", extra={"reason": str(exc)})
        return {"error": "unauthorized"}, 401
    except Forbidden as exc:
        log.warning("rejected internal request", extra={"reason": str(exc)})
        return {"error": "forbidden"}, 403
    return None

"""OIDC verification for the internal entry points (agent_session from Cloud Tasks, sweep from Cloud Scheduler).

Cloud Tasks and Cloud Scheduler sign an ID token as a configured service
account, for an audience (the function URL). google-auth verifies the signature
against Google's certificates, the expiry and the audience; we also require the
token to be for the one service account allowed to call. ``REQUIRE_OIDC=false``
switches this off for local runs, where the emulators send no token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared import config

log = logging.getLogger(__name__)

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"


class Unauthorized(Exception):
    """No usable token: 401."""


class Forbidden(Exception):
    """A valid token for someone else: 403."""


def verify(
    headers: Mapping[str, str], *, audience: str, service_account: str, certs_url: str = GOOGLE_CERTS_URL
) -> str:
    """Check the bearer ID token; returns the caller's email, or raises Unauthorized / Forbidden."""
    import google.auth.transport.requests
    from google.oauth2 import id_token

    header = headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    try:
        claims = id_token.verify_token(
            token, google.auth.transport.requests.Request(), audience=audience, certs_url=certs_url
        )
    except Exception as exc:  # google-auth raises ValueError and friends for every invalid token
        raise Unauthorized(f"invalid token: {exc}") from exc
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

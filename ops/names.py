"""People by name wherever a person reads the console or the terminal: Slack user ids resolved with ``users.info``
(the product's own bot token and API URL; the local stack's fake Slack answers it too), each looked up once.

Slack's own markup (``<@U123>``, ``<#C1|ops>``, ``<!here>``, ``<https://x|label>``) is for Slack to render; a
terminal or a page that is not Slack shows the readable form instead. Without a token, or when Slack refuses, an
id is shown as itself (``@U123``), never in angle brackets.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

Lookup = Callable[[str], str | None]
USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_TOKEN = re.compile(r"<([@#!])?([^<>|\s]+)(?:\|([^<>]*))?>")
MENTIONED = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>")


def slack_lookup(user_id: str) -> str | None:
    """A person's handle from ``users.info`` with the product's Slack settings; None without a token or on error."""
    from slack_sdk.errors import SlackApiError

    from shared import config
    from shared.slack.client import client

    if not config.settings().slack_bot_token:
        return None
    try:
        user = client().users_info(user=user_id).get("user") or {}
    except (SlackApiError, OSError) as exc:
        log.info("users.info failed", extra={"user": user_id, "error": str(exc)})
        return None
    profile = user.get("profile") or {}
    return str(profile.get("display_name") or user.get("name") or profile.get("real_name") or "") or None


class Names:
    """Ids to names, each looked up once per process (a listing names the same few people many times)."""

    def __init__(self, lookup: Lookup = slack_lookup) -> None:
        self._lookup = lookup
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def name(self, user_id: str | None) -> str:
        """``@handle`` for a user id; anything that is not one (a label such as "an operator") as it is."""
        if not user_id:
            return "?"
        if not USER_ID.match(user_id):
            return user_id
        with self._lock:
            found = self._known.get(user_id)
        if found is None:
            found = f"@{self._lookup(user_id) or user_id}"
            with self._lock:
                self._known[user_id] = found
        return found

    def names(self, user_ids: Iterable[str]) -> dict[str, str]:
        return {user_id: self.name(user_id) for user_id in user_ids if user_id}

    def readable(self, text: str | None) -> str:
        """Slack markup as a person reads it: mentions by name, channels and broadcasts by their label, links as
        their label (and address)."""

        def one(match: re.Match[str]) -> str:
            sigil, target, label = match.group(1), match.group(2), match.group(3)
            if sigil == "@":
                return f"@{label}" if label else self.name(target)
            if sigil == "#":
                return f"#{label or target}"
            if sigil == "!":
                return f"@{label or target.split('^')[0]}"
            return f"{label} ({target})" if label and label != target else target

        plain = _TOKEN.sub(one, text or "")
        return plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mentioned(text: str | None) -> set[str]:
    """The user ids ``text`` mentions."""
    return set(MENTIONED.findall(text or ""))

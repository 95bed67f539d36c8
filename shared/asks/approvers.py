"""Who may decide an approval: the approvers its tool's rule named when it was asked (Slack users, and members of
Slack user groups), else the operators (and the requester with ``ALLOW_REQUESTER_APPROVALS``).

A user group's members are read with ``usergroups.users.list`` and kept for ``GROUP_CACHE_SECONDS`` per instance:
a press is answered within Slack's 3 s, and a membership change reaches decisions within minutes. A group that
cannot be read admits nobody through it (the refusal says so), never everybody.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError

from shared import config
from shared.config_values import Tier, TierRule, as_received
from shared.slack import backpressure
from shared.slack import client as slack
from shared.state.models import Approval

log = logging.getLogger(__name__)

GROUP_CACHE_SECONDS = 180.0
UNREADABLE: tuple[type[Exception], ...] = (SlackApiError, *backpressure.CONNECTION_ERRORS)

_lock = threading.Lock()
_groups: dict[str, tuple[float, frozenset[str]]] = {}


def group_members(group: str, *, clock: Callable[[], float] = time.monotonic) -> frozenset[str]:
    """The members of a Slack user group (cached a few minutes); empty when Slack will not say."""
    at = clock()
    with _lock:
        cached = _groups.get(group)
    if cached is not None and at - cached[0] < GROUP_CACHE_SECONDS:
        return cached[1]
    try:
        response = slack.client().usergroups_users_list(usergroup=group)
        members = frozenset(str(u) for u in response.get("users") or [])
    except UNREADABLE as exc:  # refused, or Slack out of reach: not kept
        error = exc.response.get("error") if isinstance(exc, SlackApiError) else f"{type(exc).__name__}: {exc}"
        log.warning("user group members unreadable", extra={"group": group, "error": error})
        return frozenset()
    with _lock:
        _groups[group] = (at, members)
    return members


def forget_groups() -> None:
    """Drop the cached memberships (tests)."""
    with _lock:
        _groups.clear()


def may_decide(user: str, approval: Approval) -> bool:
    """True if ``user`` may approve or deny this call."""
    if approval.approvers:
        if user in approval.approvers:
            return True
        return any(user in group_members(g) for g in approval.approvers if g.startswith("S"))
    settings = config.settings()
    if user in settings.operator_user_ids:
        return True
    return settings.allow_requester_approvals and user == approval.requested_by


def crossed(approval: Approval, edited: Mapping[str, Any]) -> str | None:
    """None if ``edited`` arguments fall in the same case of the tool's rule (its ``when``, or not) as the call
    asked: the approvers and tier written on the approval were chosen for that case. Else the argument whose
    edited value moved the call into the other case (the first of the rule's that did)."""
    if not approval.rule_when:
        return None
    when = tuple((str(k), tuple(v)) for k, v in json.loads(approval.rule_when).items())
    schema = json.loads(approval.schema) if approval.schema else None
    asked, edited = as_received(schema, json.loads(approval.args)), as_received(schema, edited)
    rule = TierRule(Tier.APPROVE.value, when=when)
    if rule.matches(edited) == rule.matches(asked):
        return None
    for condition in when:
        alone = TierRule(Tier.APPROVE.value, when=(condition,))
        if alone.matches(edited) != alone.matches(asked):
            return condition[0]
    return when[0][0]


def refusal(approval: Approval) -> str:
    """What a person who may not decide is told."""
    if approval.approvers:
        return "Only this call's approvers can approve or deny it; nothing changed."
    return "Only the operators can approve or deny this; nothing changed."

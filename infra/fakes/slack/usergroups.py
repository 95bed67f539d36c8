"""Slack's user groups and message permalinks in the fake. ``usergroups.users.list`` answers a group's members as
Slack does (``users``; ``no_such_subteam`` for an unknown group). The local workspace has one group, ``S0ONCALL``
(handle ``oncall``), whose only member is Olivia Operator; ``POST /_fake/usergroup`` sets a group's members (tests,
and trying rules). ``chat.getPermalink`` answers a message's link as Slack forms it.
"""

from __future__ import annotations

from .state import Json, SlackError, Workspace, req


def usergroups_users_list(ws: Workspace, args: Json) -> Json:
    group = req(args, "usergroup", "no_such_subteam")
    members = ws.usergroups.get(group)
    if members is None:
        raise SlackError("no_such_subteam")
    return {"ok": True, "users": list(members)}


def ctl_usergroup(ws: Workspace, args: Json) -> Json:
    """Set a user group's members: ``usergroup`` and ``users`` (a list of user ids)."""
    group = req(args, "usergroup", "no_such_subteam")
    users = args.get("users")
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise ValueError("users must be a list of user ids")
    ws.usergroups[group] = list(users)
    return {"ok": True, "usergroup": group, "users": list(users)}


def chat_get_permalink(ws: Workspace, args: Json) -> Json:
    """A message's permalink, as Slack forms it (``/archives/<channel>/p<ts without the dot>``); the page opens it."""
    channel = req(args, "channel", "channel_not_found")
    ts = req(args, "message_ts", "message_not_found")
    if ws.find(channel, ts) is None:
        raise SlackError("message_not_found")
    return {"ok": True, "channel": channel, "permalink": f"{ws.base_url}/archives/{channel}/p{ts.replace('.', '')}"}


API = {"usergroups.users.list": usergroups_users_list, "chat.getPermalink": chat_get_permalink}
CONTROL = {("POST", "usergroup"): ctl_usergroup}

"""What Slack's status line says a session is doing while one of its tool calls runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

_DOING = {
    "read_thread": "is reading the thread",
    "ask_operator": "is asking the operator",
    "ask_parent": "is asking the session that delegated its task",
    "answer_child": "is answering a delegated task",
    "delegate": "is delegating",
    "post_update": "is posting an update",
    "show_plan": "is planning",
}
APPROVAL = "is waiting for an approval"


def doing(tool: str, args: Mapping[str, Any] | None) -> str:
    """The status for a call of ``tool``: a fetch names its host, a tool without its own words is named."""
    if tool == "fetch_url":
        url = str((args or {}).get("url") or "")
        try:
            host = urlsplit(url).hostname if "://" in url else None
        except ValueError:  # not a URL the fetch will accept either
            host = None
        return f"is fetching {host}" if host else "is fetching a page"
    return _DOING.get(tool) or f"is running {tool}"


# Tools that post in the thread themselves (a question, an update, the delegated tasks' message) or show themselves
# (the plan): their post says it, and a task card would only open a stream to close it again at once.
_POSTING = frozenset({"ask_operator", "post_update", "delegate", "ask_parent", "answer_child", "show_plan"})


def task(tool: str, args: Mapping[str, Any] | None) -> tuple[str, list[tuple[str, str]]] | None:
    """A tool step as a task card in a streamed answer: its title ("Fetching example.com") and its sources (a
    fetch's page, as (url, text)); None for a tool whose own post shows it."""
    if tool in _POSTING:
        return None
    said = doing(tool, args).removeprefix("is ")
    url = str((args or {}).get("url") or "") if tool == "fetch_url" else ""
    sources = [(url, urlsplit(url).hostname or url)] if url.startswith(("http://", "https://")) else []
    return said[:1].upper() + said[1:], sources

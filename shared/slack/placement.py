"""Where a conversation's messages go: in its thread, or in the DM itself.

A mention in a channel is answered in the mention's thread. A message typed at the top level of a person's DM with
the app is answered at the top level (Slack's agent view and the app's Messages tab show a DM as a conversation,
and an answer tucked into a thread under the person's own message reads as no answer), while a message typed in a
thread of the DM is answered in that thread. Everything else keeps the thread as the conversation's key: its
sessions, questions and continuations are found by ``(channel, thread_ts)`` wherever the posts go, the thread
being the top-level request's own ts (see ``shared/state/dm_conversations.py`` for how the DM's later top-level
messages find it).

A conversation is at the DM's top level exactly when its thread is its request message in a DM: a session started
by a reply inside a thread has a request of its own, after the thread's root.
"""

from __future__ import annotations


def is_dm(channel: str) -> bool:
    """A person's direct message with the app (Slack's IM conversation ids start with D)."""
    return channel.startswith("D")


def top_level(channel: str, thread_ts: str, request_ts: str | None) -> bool:
    """Whether the conversation keyed ``(channel, thread_ts)`` shows at the top level of a DM."""
    return is_dm(channel) and request_ts is not None and thread_ts == request_ts


def reply_ts(channel: str, thread_ts: str, request_ts: str | None) -> str | None:
    """The ``thread_ts`` a post of this conversation is sent with: None at the top level of a DM."""
    return None if top_level(channel, thread_ts, request_ts) else thread_ts

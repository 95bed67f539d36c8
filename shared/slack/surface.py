"""The thread surface: what a session shows in its Slack thread while it works and when it ends.

The agent talks to a ``ThreadSurface`` (working, paused, done, failed, post) instead of adding reactions itself,
so Slack's own status and streaming can replace reactions later in one place. Posts carry a key in message
metadata; after a crash ``recover`` reads the thread once so no key is posted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from slack_sdk.models.blocks import Block

from shared.slack import client as slack
from shared.slack.mrkdwn import to_slack_messages


class Reaction(StrEnum):
    """Every reaction the product uses, named once."""

    WORKING = "eyes"
    DONE = "white_check_mark"
    FAILED = "warning"
    QUESTION = "speech_balloon"  # on an open question's post
    ANSWERED = "white_check_mark"  # on the message that answered a question


class ThreadSurface:
    """One session's view of its thread: the message that started it, and the posts it made."""

    def __init__(self, channel: str, thread_ts: str, trigger_ts: str, *, quiet: bool = False) -> None:
        self.channel = channel
        self.thread_ts = thread_ts
        self.trigger_ts = trigger_ts
        self.quiet = quiet  # a delegated child: it reports to its parent, and posts only what operators must see
        self.posted: dict[str, str] = {}  # post keys Slack already has, mapped to their ts

    def recover(self) -> None:
        """After a takeover: learn which of this session's posts Slack already has (one thread read)."""
        self.posted = slack.posted_keys(self.channel, self.thread_ts)

    def working(self) -> None:
        if not self.quiet:
            slack.react(self.channel, self.trigger_ts, Reaction.WORKING)

    def paused(self) -> None:
        if not self.quiet:
            slack.unreact(self.channel, self.trigger_ts, Reaction.WORKING)

    def done(self) -> None:
        self._end(Reaction.DONE)

    def failed(self) -> None:
        self._end(Reaction.FAILED)

    def silent(self) -> None:
        """Ended without reporting back: the narration that follows will speak."""
        self.paused()

    def _end(self, reaction: Reaction) -> None:
        if not self.quiet:
            slack.unreact(self.channel, self.trigger_ts, Reaction.WORKING)
            slack.react(self.channel, self.trigger_ts, reaction)

    def post(self, text: str, *, key: str, blocks: Sequence[Block] | None = None, for_operators: bool = False) -> str:
        """Post one message (mrkdwn) unless Slack already has ``key``; returns its ts.

        A quiet surface (a delegated child's) posts only what is for the operators (an approval card, an alert);
        a tool's progress message is dropped there, and its ts is empty.
        """
        if self.quiet and not for_operators:
            return ""
        ts = self.posted.get(key) or slack.post(self.channel, self.thread_ts, text, key=key, blocks=blocks)
        self.posted[key] = ts
        return ts

    def post_markdown(self, markdown: str, *, key: str) -> list[str]:
        """Post Markdown as one or more messages (converted and split); parts Slack already has are skipped."""
        chunks = to_slack_messages(markdown) or ["(no answer)"]
        return [self.post(chunk, key=f"{key}:{i}") for i, chunk in enumerate(chunks)]

    def react(self, ts: str, reaction: Reaction) -> None:
        slack.react(self.channel, ts, reaction)

    def unreact(self, ts: str, reaction: Reaction) -> None:
        slack.unreact(self.channel, ts, reaction)

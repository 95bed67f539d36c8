"""The thread surface: what a session shows in its Slack thread while it works and when it ends.

The agent talks to a ``ThreadSurface`` (working, doing, paused, done, failed, post) instead of calling Slack
itself, so this is the one place that decides how work shows: Slack's own status under the thread ("is
thinking…", "is fetching example.com"), cleared when the session pauses or ends. Slack removes a status two minutes
after it was set if the app posted nothing meanwhile, so a step that finds it older than ``STATUS_REFRESH_SECONDS``
sets it again, unchanged, and so does the run's heartbeat (``keep_shown``) while one step (a model turn, a tool)
takes longer than that: the status it sets is the latest the run set, never one after the run posted or paused.
In a session's run a status is set beside what the run does next (``beside``: its model request need not wait for
Slack), and every later Slack call of the surface (its answer stream's too) waits for it first, so Slack sees them
in the order the run made them. Where Slack refuses a status (a missing scope, a token or
a channel it does not allow), the surface falls back to the 👀 reaction for the rest of its session, without asking
again. The end of a session is marked with a reaction either way: a status is gone once the session stops, a
reaction stays.

Posts carry a key in message metadata; after a crash ``recover`` reads the thread once so no key is posted twice.
A top-level session's surface also has an answer stream (``shared/slack/stream.py``): its tool steps as task cards
and its final answer streamed into one message; ``answer`` finishes it, or posts the answer where it cannot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from enum import StrEnum

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block

from shared.slack import backpressure, placement
from shared.slack import client as slack
from shared.slack.blocks import ANSWER_CHARS, answer_blocks
from shared.slack.mrkdwn import to_mrkdwn
from shared.slack.split import split_message
from shared.slack.stream import AnswerStream, feedback_only

log = logging.getLogger(__name__)


class Reaction(StrEnum):
    """Every reaction the product uses, named once."""

    WORKING = "eyes"
    DONE = "white_check_mark"
    FAILED = "warning"
    STOPPED = "octagonal_sign"
    QUESTION = "speech_balloon"  # on an open question's post
    ANSWERED = "white_check_mark"  # on the message that answered a question


THINKING = "is thinking…"
MAX_STATUS_CHARS = 100  # a status is one short line under the thread
STATUS_REFRESH_SECONDS = 90.0  # Slack removes a status 2 minutes after it was set with no message since: set again

# Runs a display update (named) beside the caller's work, its failure logged (the run's ``RunState.show_beside``).
ShowBeside = Callable[[str, Callable[[], object]], Future[None]]


def _stale(at: float) -> bool:
    """Whether a status set at ``at`` (time.monotonic) is to be set again: Slack may have removed it."""
    return time.monotonic() - at >= STATUS_REFRESH_SECONDS


class ThreadSurface:
    """One session's view of its thread: the message that started it, and the posts it made."""

    def __init__(self, channel: str, thread_ts: str, trigger_ts: str, *, quiet: bool = False) -> None:
        self.channel = channel
        self.thread_ts = thread_ts
        self.trigger_ts = trigger_ts
        # Where posts go: the thread, or the DM itself for a request typed at a DM's top level (shared/slack/placement)
        self.reply_ts = placement.reply_ts(channel, thread_ts, trigger_ts)
        self.quiet = quiet  # a delegated child: it reports to its parent, and posts only what operators must see
        self.posted: dict[str, str] = {}  # post keys Slack already has, mapped to their ts
        self.status: str | None = None  # the status Slack shows now, as far as this run knows (None: not set yet)
        self.status_at = 0.0  # when it was set (time.monotonic)
        self.status_refused = False  # Slack refused a status: the 👀 reaction shows the work instead
        self.reacted = False  # the 👀 reaction was added to the trigger message (the fallback), or tried
        self.stream: AnswerStream | None = None  # streamed answers with task cards (shared/slack/stream.py)
        self.beside: ShowBeside | None = None  # where a status is set beside the run's work (None: before it returns)
        self._setting: Future[None] | None = None  # the status being set beside: any later Slack call waits for it
        self._asked = ("", 0.0)  # the status it sets, and when it was asked for
        # Held while a status is set or cleared, or a post made: the heartbeat's ``keep_shown`` sets none between
        self._showing = threading.Lock()

    def settled(self) -> None:
        """Wait for the status being set beside the run (if one is), so Slack has it before this surface's next
        call. Its failure was logged there, never raised here (the work shows without it)."""
        setting, self._setting = self._setting, None
        if setting is not None:
            setting.result()

    def recover(self) -> None:
        """After a takeover: learn which of this session's posts Slack already has (one read of the thread, or of
        the DM after the request)."""
        self.settled()
        if self.reply_ts is None:
            self.posted = slack.posted_keys_after(self.channel, self.trigger_ts)
        else:
            self.posted = slack.posted_keys(self.channel, self.thread_ts)

    def working(self) -> None:
        """The session is working (a model turn is next)."""
        self.doing(THINKING)

    def doing(self, status: str) -> None:
        """What the session is doing now ("is reading the thread"); Slack is asked only when it changes, beside
        what the run does next where it can (``beside``)."""
        if self.quiet:
            return
        status = status[:MAX_STATUS_CHARS]
        setting = self._setting
        if setting is not None and not setting.done() and self._asked[0] == status and not _stale(self._asked[1]):
            return  # that status is being set: what the run does next need not wait for it (one that failed is not)
        self.settled()  # the last status's outcome decides this one
        if not self.status_refused and (status != self.status or _stale(self.status_at)):
            self._show(status, lambda: self._set_status(status))
        elif self.status_refused and not self.reacted:
            self._show(status, self._react_working)

    def _show(self, status: str, work: Callable[[], None]) -> None:
        if self.beside is None:
            work()
        else:
            self._setting, self._asked = self.beside("the status", work), (status, time.monotonic())

    def keep_shown(self) -> None:
        """From the run's heartbeat: the status Slack shows is set again, unchanged, when Slack may be about to
        remove it (set ``STATUS_REFRESH_SECONDS`` ago, with no post since), while one step outlasts that. Nothing
        while a status is being set beside the run, after a post (the run's next step sets it), once cleared, or
        where Slack refused statuses."""
        with self._showing:
            setting = self._setting
            if self.quiet or self.status_refused or not self.status or not _stale(self.status_at):
                return
            if setting is not None and not setting.done():
                return
            # A refresh only keeps up what Slack shows meanwhile, under the lock a post takes: a 429 or a 5xx skips it
            # at once (the next beat tries again), never holding the run's next post for Slack's Retry-After.
            with backpressure.waiting_at_most(0.0):
                shown = slack.set_status(self.channel, self.thread_ts, self.status) is None
            if shown:
                self.status_at = time.monotonic()

    def _set_status(self, status: str) -> None:
        with self._showing:
            refused = slack.set_status(self.channel, self.thread_ts, status)
            if refused is None:
                self.status, self.status_at = status, time.monotonic()
        if refused is None:
            return
        self.status_refused = True  # for the rest of this session: no retry on every step
        if not self.reacted:
            self._react_working()

    def _react_working(self) -> None:
        slack.react(self.channel, self.trigger_ts, Reaction.WORKING)
        self.reacted = True  # tried: a refused reaction is not asked for again at every step either

    def paused(self) -> None:
        """The session waits (or ends): its status is cleared, or the fallback's 👀 removed."""
        if self.quiet:
            return
        self.settled()
        if self.stream is not None:
            self.stream.close()
        if not self.status_refused and self.status != "":
            with self._showing:
                cleared = slack.set_status(self.channel, self.thread_ts, "") is None
                self.status = "" if cleared else self.status
            if cleared:
                return
            self.status_refused = True
        if self.status_refused and (self.reacted or self.status is None):  # a predecessor's 👀 (a takeover)
            slack.unreact(self.channel, self.trigger_ts, Reaction.WORKING)
            self.reacted = False

    def done(self) -> None:
        self._end(Reaction.DONE)

    def failed(self) -> None:
        self._end(Reaction.FAILED)

    def stopped(self) -> None:
        self._end(Reaction.STOPPED)

    def silent(self) -> None:
        """Ended without reporting back: the narration that follows will speak."""
        self.paused()

    def _end(self, reaction: Reaction) -> None:
        if not self.quiet:
            self.paused()
            slack.react(self.channel, self.trigger_ts, reaction)

    def post(self, text: str, *, key: str, blocks: Sequence[Block] | None = None, for_operators: bool = False) -> str:
        """Post one message (mrkdwn) unless Slack already has ``key``; returns its ts.

        A quiet surface (a delegated child's) posts only what is for the operators (an approval card, an alert);
        a tool's progress message is dropped there, and its ts is empty.
        """
        if self.quiet and not for_operators:
            return ""
        self.settled()
        ts = self.posted.get(key)
        if not ts and self.stream is not None and (reused := self.stream.reuse(key)):
            try:  # the answer replaces the message its stream left
                slack.update(self.channel, reused, text, blocks=blocks, key=key)
                ts = reused
            except SlackApiError as exc:
                log.warning("could not replace a stream's message", extra={"error": exc.response.get("error")})
        if not ts and self.stream is not None:
            self.stream.close()  # what the session posts comes after the steps shown so far, never above them
        if not ts:
            with self._showing:
                ts = slack.post(self.channel, self.reply_ts, text, key=key, blocks=blocks)
                if self.status:
                    self.status = None  # Slack clears a thread's status when the app posts: set it again next step
        self.posted[key] = ts
        return ts

    def post_markdown(self, markdown: str, *, key: str, feedback: str | None = None) -> list[str]:
        """Post Markdown as one or more messages, each a ``markdown`` block Slack renders (split to fit its limit)
        with the part converted to mrkdwn as the ``text`` fallback (notifications, screen readers, clients without
        the block); parts Slack already has are skipped. With ``feedback`` (the session's id) the last message
        carries the 👍/👎 buttons."""
        parts = split_message(markdown, ANSWER_CHARS) or ["(no answer)"]
        last = len(parts) - 1
        shown = [answer_blocks(part, feedback if i == last else None) for i, part in enumerate(parts)]
        return [self.post(to_mrkdwn(part), key=f"{key}:{i}", blocks=shown[i]) for i, part in enumerate(parts)]

    def answer(self, markdown: str, *, key: str, feedback: str) -> list[str]:
        """The final answer: its stream finished (the feedback buttons under it) when all of it was streamed, else
        posted as ``post_markdown`` does, the first part replacing whatever message the stream left."""
        first = f"{key}:0"
        if self.stream is not None and first not in self.posted:
            blocks = feedback_only(answer_blocks(markdown or ".", feedback))
            ts = self.stream.finish(markdown, key=first, blocks=blocks)
            if ts:
                self.posted[first] = ts
                return [ts]
        return self.post_markdown(markdown, key=key, feedback=feedback)

    def step(self, task_id: str, title: str, *, sources: Sequence[tuple[str, str]] = ()) -> None:
        """A tool step starts: a task card in the streamed message (the status line says it too)."""
        if self.stream is not None:
            self.stream.task(task_id, title, sources=sources)

    def plan(self, title: str, steps: Sequence[str], done: int) -> bool:
        """The session's plan, shown in its streamed message's plan display; False where nothing streams."""
        return self.stream is not None and self.stream.plan(title, steps, done)

    def step_done(self, task_id: str, *, failed: bool) -> None:
        if self.stream is not None:
            self.stream.task_done(task_id, failed=failed)

    def react(self, ts: str, reaction: Reaction) -> None:
        self.settled()
        slack.react(self.channel, ts, reaction)

    def unreact(self, ts: str, reaction: Reaction) -> None:
        self.settled()
        slack.unreact(self.channel, ts, reaction)

"""A streamed answer: Slack's ``chat.startStream`` / ``appendStream`` / ``stopStream`` on one thread message.

The answer's text is appended as the model generates it, after the session's tool steps shown as task cards
(``task_update`` chunks: in progress, then complete or error, a fetch with its page as the source). The stream is
opened empty, and its ts handed to ``on_open`` (the session records it in Firestore) before anything is appended,
so a takeover after a crash finds the message and replaces it instead of posting a second answer. A finished
answer carries its post key as metadata (``chat.stopStream`` takes metadata, ``startStream`` does not), like any
post, and the feedback buttons as the blocks ``stopStream`` renders under the text.

Slack's limits are kept: one ``markdown_text`` holds at most 12,000 characters and one call at most 50 chunks
(``stopStream``'s ``blocks`` too), so larger appends go in several calls. A stream is open for five minutes at most
(``SLACK_STREAM_SECONDS``) and a message holds so much text (``MESSAGE_CHARS``): a session that streams for longer,
or more, rolls over to a new streamed message in the same thread, which opens with every task card the last one
showed (as they stand) and takes the text on from where it stopped; the last one is stopped with its text, finished.
A stream Slack closes before that (``message_not_in_streaming_state``) rolls over the same way, the piece it
refused sent to the new message, so no text is lost.

Everything else Slack refuses degrades without losing text: a refused start (a channel type that does not stream,
a missing recipient or scope) turns streaming off for the rest of the run and the answer is posted whole; another
failed append (``msg_too_long``, ..., or one Slack answered too late, by a gateway's 502 or 504, or whose connection
was cut after it was sent: never sent again since it may have taken effect) stops appending, and the answer then
replaces the message with ``chat.update`` (split as any long answer, the rest posted after it). The whole text is
kept here, so a fallback never depends on what Slack had shown.

slack-sdk's ``ChatStream`` helper buffers the same way, but starts its stream with the first text it sends: it
cannot open an empty stream whose ts is recorded first, which exactly-once needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block
from slack_sdk.models.blocks.block_elements import UrlSourceElement
from slack_sdk.models.messages.chunk import Chunk, MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk

from shared.slack import backpressure
from shared.slack import client as slack
from shared.slack.safety import neutralise, neutralise_blocks, neutralise_markdown
from shared.slack.stream_safety import inert, safe_cut

log = logging.getLogger(__name__)

MARKDOWN_CHARS = 12_000  # Slack: one markdown_text holds at most this many characters
CHUNKS_PER_CALL = 50  # Slack: one call's chunks (and stopStream's blocks) hold at most this many
MESSAGE_CHARS = 36_000  # a streamed message's text, kept under the 40,000 of any message; more rolls over
MAX_PLAN_STEPS = 20
MAX_HELD = 2_000  # text held back as a possible token's beginning; past this it is sent, its opening made inert
CLOSED = "message_not_in_streaming_state"  # Slack closed the stream: its time is up, or it ended it
FLUSH_SECONDS = 1.0  # text waiting this long is sent with the next piece, however short
INTERRUPTED = "_(This answer was interrupted; I am picking it up again…)_"
CUT_OFF = "_(This answer was cut off.)_"
SLACK_FAILURES: tuple[type[Exception], ...] = (SlackApiError, *backpressure.CONNECTION_ERRORS)


class AnswerStream:
    """The streamed message of one session run, and everything needed to finish or replace it."""

    def __init__(
        self, channel: str, thread_ts: str, *, recipient: str, on_open: Callable[[str], None], buffer_chars: int,
        stream_seconds: float = 300.0, clock: Callable[[], float] = time.monotonic,
        settle: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        self.channel = channel
        self.thread_ts = thread_ts
        self.recipient = recipient  # the person the answer is for (Slack requires one outside a DM)
        self.on_open = on_open
        self.buffer_chars = buffer_chars
        self.lifetime = stream_seconds - min(30.0, stream_seconds / 10)  # rolled over before Slack closes it
        self.clock = clock
        self.settle = settle  # called before each call to Slack: a status its surface is setting gets there first
        self.opened_at = 0.0
        self.rolled: list[str] = []  # the earlier messages of this run's stream, finished with their part
        self.ts: str | None = None  # the stream's message
        self.open = False  # Slack still accepts appends to it
        self.final = False  # the message is finished (an answer, or steps with text) or deleted: never replaced
        self.refused: str | None = None  # chat.startStream's error: nothing is streamed for the rest of this run
        self.broken: str | None = None  # an append failed: the message is replaced, never appended to again
        self.turn_text = ""  # the current model turn's text, as generated
        self.sent = 0  # how much of turn_text was taken: sent, or neutralised into `held`
        self.held = ""  # neutralised text not sent yet: it may be the beginning of a token the next piece finishes
        self.total = 0  # characters appended to this message (every turn's)
        self.flushed_at = 0.0
        self.tasks: dict[str, TaskUpdateChunk] = {}  # cards in progress, by id
        self.shown_cards: dict[str, TaskUpdateChunk] = {}  # every card this message showed, by id
        self.done: list[Chunk] = []  # the plan and cards of a closed message, replayed (as they stand) by the next one
        self.mode = "timeline"  # Slack's task_display_mode for the next stream: "plan" once the session states one
        self.plan_title: str | None = None
        self.replace_key: str | None = None  # the answer post that replaces this message (a fallback)
        self.rolled_now = False  # the message was just opened because Slack closed the last one

    @property
    def streaming(self) -> bool:
        """Whether a model turn's text should be streamed now."""
        return self.refused is None and (self.broken is None or self.ts is None)

    # --- a model turn's text -----------------------------------------------------------
    def begin_turn(self) -> None:
        self.turn_text, self.sent, self.held = "", 0, ""

    def text(self, piece: str) -> None:
        """More of the turn's text; sent when enough has gathered (the first piece at once)."""
        self.turn_text += piece
        due = self.sent == 0 or len(self.turn_text) - self.sent >= self.buffer_chars
        if due or time.monotonic() - self.flushed_at >= FLUSH_SECONDS:
            self._flush(final=False)

    def end_turn(self, *, answered: bool) -> None:
        """The turn is complete: its text is flushed. A turn that called tools keeps its text in the message as
        narration, and the next turn's text follows it."""
        self._flush(final=True)
        if not answered:
            self.begin_turn()

    # --- tool steps as task cards -----------------------------------------------------
    def task(self, task_id: str, title: str, *, sources: Sequence[tuple[str, str]] = ()) -> None:
        shown = [UrlSourceElement(url=u, text=neutralise(t)) for u, t in sources] or None
        chunk = TaskUpdateChunk(id=task_id, title=neutralise(title)[:256], status="in_progress", sources=shown)
        self.tasks[task_id] = chunk
        self._append([chunk])

    def task_done(self, task_id: str, *, failed: bool = False) -> None:
        chunk = self.tasks.pop(task_id, None)
        if chunk is not None:
            chunk.status = "error" if failed else "complete"
            self._append([chunk])

    def plan(self, title: str, steps: Sequence[str], done: int) -> bool:
        """The session's plan in Slack's plan display: its ``steps`` as the plan's tasks, the first ``done``
        complete and the next in progress. A stream's display mode is set when it starts, so an open timeline
        stream rolls over to one in plan mode, its cards and text carried on. False where nothing streams."""
        if not self.streaming:
            return False
        self.plan_title = neutralise(title.strip())[:256] or "Plan"  # the model's words: no ping forms from them
        if self.mode != "plan":
            self.mode = "plan"
            if self.open:
                self._roll_over()  # the new message opens with the plan's title and the cards
        carried = bool(self.done) and isinstance(self.done[0], PlanUpdateChunk)
        chunks: list[Chunk] = [] if carried else [PlanUpdateChunk(title=self.plan_title)]
        for n, step in enumerate(steps[:MAX_PLAN_STEPS]):
            status = "complete" if n < done else "in_progress" if n == done else "pending"
            shown = neutralise(step.strip())[:256] or f"Step {n + 1}"
            chunks.append(TaskUpdateChunk(id=f"plan.{n}", title=shown, status=status))
        return self._append(chunks)

    # --- the end of the message --------------------------------------------------------
    def finish(self, text: str, *, key: str, blocks: Sequence[Block]) -> str | None:
        """End the stream with the whole answer ``text``, its post key and ``blocks``; its ts, or None if the answer
        must be posted instead (then a message this stream left is replaced by the answer's first part)."""
        if self.ts is None or self.final:
            return None
        shown = self.turn_text[: self.sent]
        if self.open and self.broken is None and text.startswith(shown):
            self.turn_text = text  # a turn that was not streamed (a wrap-up) is appended whole
            self._flush(final=True)
        if self.open and self.broken is None and self.all_sent and self.turn_text == text:
            if self.clock() - self.opened_at >= self.lifetime:
                self._roll_over()  # too old to stop in time: the answer ends in a new message with its cards
                self._append([])
            if self._stop_answer(key, blocks):
                return self.ts
        self.replace_key = key
        return None

    def _stop_answer(self, key: str, blocks: Sequence[Block]) -> bool:
        """Stop the stream with the answer's key and buttons; a stream Slack closed meanwhile (its text is all
        there) rolls over, and the key and buttons end a new message that carries the cards."""
        self.settle()
        for attempt in range(2):
            if not self.open or self.ts is None:
                return False
            try:
                slack.stop_stream(self.channel, self.ts, key=key, blocks=neutralise_blocks(blocks))
            except backpressure.CONNECTION_ERRORS as exc:  # it may have stopped: the answer replaces the message
                if backpressure.never_sent(exc):
                    raise
                self._failed("chat.stopStream", exc)
                return False
            except SlackApiError as exc:
                if exc.response.get("error") == CLOSED and attempt == 0:
                    self._roll_over(closed=True)
                    self._append([])
                    continue
                self._failed("chat.stopStream", exc)
                return False
            self.open, self.final = False, True
            return True
        return False

    def reuse(self, key: str) -> str | None:
        """The message the answer post ``key`` replaces (its stream stopped first), or None."""
        if key != self.replace_key or self.ts is None:
            return None
        self.replace_key, self.final = None, True  # the answer's from now on: never replaced again
        self._stop(key=None)
        return self.ts

    def close(self) -> None:
        """The session pauses, ends or posts something else: the stream stops here, and what the session posts
        comes after it. A message that got text stays, marked finished (a takeover leaves it alone); one that only
        showed task cards while they ran is deleted, and its cards open the next stream of the run as done."""
        if self.ts is None or not self.open:
            return
        self._flush(final=True)
        self.final = True
        for chunk in self.tasks.values():
            chunk.status = "complete"
        cards: list[Chunk] = list(self.tasks.values())
        self.tasks.clear()
        if self.total:
            self._stop(key=f"{self.ts}:steps", chunks=cards)
            return
        self._stop(key=None)
        self.done = self._carried()
        try:
            slack.delete(self.channel, self.ts)
        except SlackApiError as exc:
            log.warning("could not delete a stream of task cards", extra={"error": exc.response.get("error")})

    def retract(self) -> None:
        """The model turn failed part-way: the text it had shown is taken back (the session says what happened, or
        the answer of a turn tried again replaces it; nothing more is streamed in this run)."""
        if self.ts is not None and self.sent:
            self.settle()
            self.broken = "cut off"
            self._stop(key=None)
            try:
                slack.update(self.channel, self.ts, CUT_OFF)
            except SlackApiError as exc:
                log.warning("could not take back a cut-off answer", extra={"error": exc.response.get("error")})
        self.begin_turn()

    def adopt(self, ts: str) -> None:
        """A takeover: ``ts`` is the stream a crashed run left unfinished. It is stopped and its partial text taken
        back at once; this run streams nothing, and its answer replaces that message."""
        self.ts, self.open, self.refused = ts, True, "taken over"
        self._stop(key=None)
        try:
            slack.update(self.channel, ts, INTERRUPTED)
        except SlackApiError as exc:
            log.warning("could not take back an interrupted stream", extra={"error": exc.response.get("error")})

    # --- Slack calls ---------------------------------------------------------------------
    def _stop(self, *, key: str | None, chunks: Sequence[Chunk] = ()) -> None:
        if self.ts is None or not self.open:
            return
        self.open = False
        self.settle()
        *first, last = _batches(list(chunks)) or [[]]
        try:
            for batch in first:  # more than one call holds: the last batch goes with the stop
                slack.append_stream(self.channel, self.ts, batch)
            slack.stop_stream(self.channel, self.ts, key=key, chunks=last)
        except SLACK_FAILURES as exc:
            if not isinstance(exc, SlackApiError) and backpressure.never_sent(exc):
                raise
            log.info("stream already over", extra={"error": _error(exc)})

    def _flush(self, *, final: bool) -> None:
        """Send what of the turn's text may be sent: neutralised as the Markdown it is, and cut where no token can
        form with what comes next (shared/slack/stream_safety.py); a final piece is made inert at its end."""
        if self.sent == len(self.turn_text) and not self.held:
            return
        if self.open and self.total >= MESSAGE_CHARS:
            self._roll_over()  # the message is full: the text goes on in a new one
        room = MESSAGE_CHARS - (self.total if self.open else 0)  # a message opened for this piece is empty
        text = neutralise_markdown(self.held + self.turn_text[self.sent :])
        if len(text) > room:  # the message is full after this piece: nothing can join its end
            piece, rest = inert(text[:room]), text[room:]
        elif final or len(text) - safe_cut(text) > MAX_HELD:  # the end, or a "token" too long to be one: made inert
            piece, rest = inert(text), ""
        else:
            cut = safe_cut(text)
            piece, rest = text[:cut], text[cut:]
        self.flushed_at = time.monotonic()
        if not piece:
            self.sent, self.held = len(self.turn_text), rest
            return
        if self._append([MarkdownTextChunk(text=piece)]):
            self.sent, self.held, self.total = len(self.turn_text), rest, self.total + len(piece)

    @property
    def all_sent(self) -> bool:
        """Slack has all of the turn's text."""
        return self.sent == len(self.turn_text) and not self.held

    def _append(self, chunks: list[Chunk]) -> bool:
        """Send ``chunks`` to the stream, in as many calls as Slack's limits need, rolling over to a new message
        when this one is too old or Slack closed it; False if the stream cannot take them (nothing is lost: the
        answer is posted whole)."""
        if self.open and self.broken is None and self.clock() - self.opened_at >= self.lifetime:
            self._roll_over()
        pending = _batches(chunks)
        self.settle()
        while pending or self.done:
            if not self._ensure_open():
                return False
            assert self.ts is not None
            if self.done:  # the run's earlier cards open a new message, as they stand
                pending, self.done = _batches([*self.done, *[c for b in pending for c in b]]), []
            batch = pending[0]
            try:
                slack.append_stream(self.channel, self.ts, batch)
            except backpressure.CONNECTION_ERRORS as exc:  # Slack may have taken it: never sent again (backpressure)
                if backpressure.never_sent(exc):
                    raise
                self._failed("chat.appendStream", exc)
                return False
            except SlackApiError as exc:
                if exc.response.get("error") == CLOSED and not self.rolled_now:
                    self._roll_over(closed=True)  # Slack closed it: the same chunks go to a new message
                    continue
                self._failed("chat.appendStream", exc)
                return False
            self.rolled_now = False
            self.shown_cards.update({c.id: c for c in batch if isinstance(c, TaskUpdateChunk)})
            pending = pending[1:]
        return True

    def _roll_over(self, *, closed: bool = False) -> None:
        """This message is done (too old, full, or ``closed`` by Slack): it is stopped with what it shows, and the
        next chunk opens a new streamed message in the thread that starts with every card this one showed."""
        if self.ts is None:
            return
        log.info("stream rolls over to a new message", extra={"ts": self.ts, "closed": closed, "chars": self.total})
        if not closed:
            self._stop(key=f"{self.ts}:steps")
        self.open, self.final = False, True
        self.rolled.append(self.ts)
        self.rolled_now = closed  # a new message that Slack closes at once is not rolled over again
        self.done = self._carried()

    def _carried(self) -> list[Chunk]:
        """What a new message of this run opens with: the plan's title and every card shown, as they stand."""
        plan: list[Chunk] = [PlanUpdateChunk(title=self.plan_title)] if self.plan_title else []
        return [*plan, *{**self.shown_cards, **self.tasks}.values()]

    def _ensure_open(self) -> bool:
        if self.open:
            return self.broken is None
        if self.refused is not None or self.broken is not None:
            return False
        try:
            self.ts = slack.start_stream(self.channel, self.thread_ts, recipient=self.recipient, display=self.mode)
        except SLACK_FAILURES as exc:  # a start Slack may have taken: never used
            if not isinstance(exc, SlackApiError) and backpressure.never_sent(exc):
                raise
            self.refused = _error(exc)
            log.warning("stream refused; answers are posted whole", extra={"error": self.refused})
            return False
        self.open, self.final, self.total, self.shown_cards = True, False, 0, {}
        self.opened_at = self.clock()
        self.on_open(self.ts)
        return True

    def _failed(self, method: str, exc: Exception) -> None:
        self.broken = _error(exc)
        log.warning("stream failed; the answer will replace its message", extra={"method": method,
                                                                                  "error": self.broken})  # fmt: skip


def _error(exc: Exception) -> str:
    """Slack's error code, "timed_out" for a call Slack answered too late, or "connection_cut" for one whose
    connection was cut after it was sent (reset, or closed without an answer)."""
    if isinstance(exc, TimeoutError):
        return "timed_out"
    if not isinstance(exc, SlackApiError):
        return "connection_cut"
    return str(exc.response.get("error") or "unknown_error")


def _batches(chunks: Sequence[Chunk]) -> list[list[Chunk]]:
    """``chunks`` as Slack takes them: at most 12,000 characters of ``markdown_text`` and 50 chunks a call (a
    longer text is split over several chunks and calls; the text Slack assembles is the same)."""
    batches: list[list[Chunk]] = [[]]
    room = MARKDOWN_CHARS
    for chunk in chunks:
        text = chunk.text if isinstance(chunk, MarkdownTextChunk) else None
        while text is not None and len(text) > room:  # what fits ends this call, the rest opens the next
            if room:
                batches[-1].append(MarkdownTextChunk(text=text[:room]))
            text, room = text[room:], MARKDOWN_CHARS
            batches.append([])
        if len(batches[-1]) == CHUNKS_PER_CALL:
            batches.append([])
            room = MARKDOWN_CHARS
        batches[-1].append(MarkdownTextChunk(text=text) if text is not None else chunk)
        room -= len(text or "")
    return [batch for batch in batches if batch]


def feedback_only(blocks: Sequence[Any]) -> list[Any]:
    """The blocks under a streamed answer: its feedback buttons (the text is the stream's own)."""
    return [b for b in blocks if getattr(b, "type", None) == "context_actions"]

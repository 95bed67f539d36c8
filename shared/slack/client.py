"""The one Slack posting path: every message, update, reaction and thread read goes through here.

The ``WebClient`` is built on first use from configuration (so a test or the
local stack points it at the fake Slack with ``SLACK_API_BASE_URL``), with
slack-sdk's own retry handlers for rate limits, connection errors and 5xx.

Posts carry a key in Slack message metadata. The product records in Firestore
which keys a session meant to post; after a crash, ``posted_keys`` reads the
thread once to learn which of those Slack already has, so no step posts the
same message twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block
from slack_sdk.models.messages.chunk import Chunk

from shared import config, deps
from shared.errors import ShowLater
from shared.slack import backpressure
from shared.slack.safety import neutralise, neutralise_blocks

log = logging.getLogger(__name__)

POST_KEY_EVENT = "agent_post"  # the metadata event_type that marks a post made by a session step
THREAD_READ_LIMIT = 200  # messages read from a thread at most (a bounded prompt)
THREAD_READ_MAX_WAIT = 5.0  # seconds a thread read waits out a rate limit; a longer Retry-After: go on without it


def client() -> WebClient:
    """The Slack Web API client, built once per instance (``shared.deps``), with slack-sdk's own retry handlers for
    rate limits, connection errors and 5xx, bounded by the current session's wall budget (``backpressure``)."""
    return deps.once("slack", _build)


def _build() -> WebClient:
    settings = config.settings()
    return WebClient(
        token=settings.slack_bot_token,
        base_url=settings.slack_api_base_url,
        timeout=10,
        retry_handlers=backpressure.retry_handlers(),
    )


def post(channel: str, thread_ts: str | None, text: str, *, key: str, blocks: Sequence[Block] | None = None) -> str:
    """Post in a thread (or the channel, with no ``thread_ts``); returns the ts. ``key`` marks it for recovery.

    Like every post here: no broadcast or user-group ping, and no unfurling (an injected link cannot make Slack
    fetch an attacker's URL with data in it). If Slack refuses a ``markdown`` block (its size rules, or a workspace
    where it is not offered), the message goes out without it: its ``text`` (mrkdwn) carries the same content.
    """
    shown = neutralise_blocks(blocks) if blocks else None
    try:
        return _post(channel, thread_ts, text, key=key, blocks=shown)
    except SlackApiError as exc:
        plain = [block for block in shown or [] if block.get("type") != "markdown"]
        if exc.response.get("error") not in MARKDOWN_REFUSALS or plain == (shown or []):
            raise
        log.warning("markdown block refused; posting its mrkdwn text", extra={"error": exc.response.get("error")})
        return _post(channel, thread_ts, text, key=key, blocks=plain or None)


MARKDOWN_REFUSALS = frozenset({"invalid_blocks", "msg_blocks_too_long"})
POST_FAILURES: tuple[type[Exception], ...] = (SlackApiError, *backpressure.CONNECTION_ERRORS)


def best_effort(what: str, show: Callable[[], object], *, transient_raises: bool = False) -> None:
    """A call that shows what was already recorded (and queued): one Slack will not make now
    (rate-limited past the ingress's wait, the message deleted) is logged, never a 500 for a click (Slack would
    show the person an error). ``transient_raises``: a failure that may pass (a 429, a 5xx, a lost connection) is
    raised as ``ShowLater``, for a message event whose redelivery by Slack shows it again (a reply's
    acknowledgement)."""
    try:
        show()
    except POST_FAILURES as exc:
        if transient_raises and backpressure.storm(exc) is not None:  # a 429, a 5xx, no connection: may pass
            raise ShowLater(f"could not show {what} now: {exc!r}") from exc
        log.warning("could not show %s", what, extra={"error": repr(exc)})


# Seconds after a failure that Slack may have taken a post is looked for: at once, then twice more, since behind a
# 500, a gateway's 504 (or a read timeout) Slack may still be making it. Only the first past the session's deadline.
FIND_POST_AFTER = (0.0, 1.0, 3.0)
SENT_MARGIN = 60.0  # seconds before a post was sent that its lookup reads from (clocks differ)


POST_ROUNDS = 3  # sends of one post whose answer was lost (each after looking for it): a burst of 500s, not a storm


def _post(channel: str, thread_ts: str | None, text: str, *, key: str, blocks: list[dict[str, Any]] | None) -> str:
    """A post answered too late (a read timeout), whose connection was cut after it was sent (reset, closed
    without an answer, or halfway through it: ``IncompleteRead``), or answered by Slack's 500 or a gateway's 502 or
    504 may have been made: it is looked for by its key (``_look_for_post``) before it is sent again, up to
    ``POST_ROUNDS`` sends (slack-sdk's handlers never repeat it: ``backpressure.maybe_taken``). Past the session's
    deadline (a wall-time wrap-up's answer is posted there) it is looked for at once and sent again once, so an
    answer is not lost; nothing more: a post still not made then fails with its error (the session ends ``failed``,
    ``backpressure.storm``)."""
    sent = time.time()
    for round_ in range(POST_ROUNDS):
        try:
            return _send_post(channel, thread_ts, text, key=key, blocks=blocks)
        except POST_FAILURES as exc:
            if not backpressure.maybe_taken(exc):
                raise
            made = _look_for_post(channel, thread_ts, key, since=sent)
            if made is not None:
                log.warning("a post Slack may have taken was made; not sent again",
                            extra={"key": key, "error": repr(exc)})  # fmt: skip
                return made
            if round_ == POST_ROUNDS - 1 or (round_ > 0 and _past_deadline()):
                log.warning("a post Slack may have taken was not found; not sent again",
                            extra={"key": key, "error": repr(exc)})  # fmt: skip
                raise
            log.warning("a post Slack may have taken was not made; sent again", extra={"key": key, "error": repr(exc)})
    raise AssertionError("unreachable")


def _past_deadline(wait: float = 0.0) -> bool:
    """Whether something that would start ``wait`` seconds from now starts at or past the session's deadline."""
    left = backpressure.time_left()
    return left is not None and wait >= left


def _look_for_post(channel: str, thread_ts: str | None, key: str, *, since: float) -> str | None:
    """The ts of the post keyed ``key``, looked for ``FIND_POST_AFTER`` seconds after its failure (or as soon as the
    look before it ended, if that took longer); past the session's deadline only the look at once is made. A
    look Slack rate-limits for longer than a thread read waits (``conversations.replies`` allows an app outside the
    Marketplace one request a minute) ends the looking: the post is then sent again rather than lost (a duplicate
    only if Slack had made it)."""
    failed = time.monotonic()
    for after in FIND_POST_AFTER:
        wait = max(0.0, failed + after - time.monotonic())
        if after and _past_deadline(wait):  # the look at once is made even past it (a wrap-up's answer)
            return None
        time.sleep(wait)
        try:
            with backpressure.waiting_at_most(THREAD_READ_MAX_WAIT):
                made = _find_post(channel, thread_ts, key, since=since)
        except SlackApiError as exc:
            if exc.response.get("error") != "ratelimited" and exc.response.status_code != 429:
                raise
            log.warning("a post's lookup was rate-limited; it cannot tell whether Slack made it",
                        extra={"key": key, "retry_after": backpressure.retry_after(exc.response)})  # fmt: skip
            return None
        if made is not None:
            return made
    return None


def _find_post(channel: str, thread_ts: str | None, key: str, *, since: float) -> str | None:
    """The ts of the post keyed ``key`` among the thread's replies (or, at the top level, the channel's messages)
    since a little before ``since``, if Slack has it: one page, however long the thread."""
    oldest = f"{since - SENT_MARGIN:.6f}"
    if thread_ts:
        return posted_keys(channel, thread_ts, oldest=oldest).get(key)
    return posted_keys_after(channel, oldest).get(key)


def _send_post(channel: str, thread_ts: str | None, text: str, *, key: str,
               blocks: list[dict[str, Any]] | None) -> str:  # fmt: skip
    response = client().chat_postMessage(
        channel=channel,
        thread_ts=thread_ts,
        text=neutralise(text),
        blocks=blocks,
        metadata=_key_metadata(key),
        unfurl_links=False,
        unfurl_media=False,
        link_names=False,
    )
    return str(response["ts"])


def update(channel: str, ts: str, text: str, *, blocks: Sequence[Block] | None = None, key: str | None = None) -> None:
    """Edit a message; with ``key`` it is marked as that post (an answer replacing the message its stream left)."""
    # chat.update's parse defaults to "client" (postMessage's to "none"): "none" renders an edit as its post was.
    # Slack's chat.update takes no unfurl arguments.
    client().chat_update(
        channel=channel,
        ts=ts,
        text=neutralise(text),
        blocks=neutralise_blocks(blocks or []),
        link_names=False,
        parse="none",
        metadata=_key_metadata(key) if key else None,
    )


def start_stream(channel: str, thread_ts: str, *, recipient: str, display: str = "timeline") -> str:
    """Open an empty streamed reply in a thread for ``recipient`` (Slack requires the user and their team outside a
    DM); returns its ts. Text and task cards follow with ``append_stream``; ``display`` is Slack's
    ``task_display_mode``: "timeline" (cards between the text) or "plan" (the tasks together in a plan block)."""
    response = client().chat_startStream(
        channel=channel,
        thread_ts=thread_ts,
        recipient_user_id=recipient,
        recipient_team_id=_team_id(),
        task_display_mode=display,
    )
    return str(response["ts"])


def append_stream(channel: str, ts: str, chunks: Sequence[Chunk]) -> None:
    client().chat_appendStream(channel=channel, ts=ts, chunks=chunks)


def stop_stream(
    channel: str, ts: str, *, key: str | None = None, blocks: Sequence[Any] | None = None,
    chunks: Sequence[Chunk] | None = None,
) -> None:  # fmt: skip
    """Finish a stream; ``key`` marks it for recovery like any post, ``blocks`` show under its text."""
    client().chat_stopStream(
        channel=channel, ts=ts, metadata=_key_metadata(key) if key else None, blocks=blocks or None,
        chunks=chunks or None,
    )  # fmt: skip


def delete(channel: str, ts: str) -> None:
    """Delete one of the app's messages; one already gone is fine."""
    try:
        client().chat_delete(channel=channel, ts=ts)
    except SlackApiError as exc:
        if exc.response.get("error") != "message_not_found":
            raise


def _key_metadata(key: str) -> dict[str, Any]:
    return {"event_type": POST_KEY_EVENT, "event_payload": {"key": key}}


def _team_id() -> str:
    """The workspace's team id (auth.test, asked once per client)."""
    return str(_identity()["team_id"])


def bot_user_id() -> str | None:
    """This app's bot user id (auth.test, asked once per client): what tells its own posts in a thread from those
    of other apps; None if Slack would not say."""
    try:
        user = _identity().get("user_id")
    except POST_FAILURES as exc:  # Slack refused or could not be reached: no post is shown as the assistant's
        log.warning("could not learn the bot's own user id", extra={"error": repr(exc)})
        return None
    return str(user) if user else None


def _identity() -> dict[str, Any]:
    web = client()
    found = _IDENTITIES.get(id(web))
    if found is None:
        found = _IDENTITIES[id(web)] = dict(web.auth_test().data)  # type: ignore[arg-type]
    return found


_IDENTITIES: dict[int, dict[str, Any]] = {}  # auth.test's answer, filled on first use, per WebClient


def ephemeral(channel: str, user: str, text: str, *, thread_ts: str | None = None) -> None:
    """A note only ``user`` sees. Always a courtesy, told after what it reports was decided and recorded: one Slack
    will not show now (rate-limited past the ingress's wait, the person not in the channel) is logged, never a 500
    for the click or the message that caused it (Slack would show an error, or deliver the message again)."""
    # Slack's chat.postEphemeral takes no unfurl arguments.
    best_effort("an ephemeral note", lambda: client().chat_postEphemeral(
        channel=channel, user=user, text=neutralise(text), thread_ts=thread_ts, link_names=False))  # fmt: skip


def set_status(channel: str, thread_ts: str, status: str) -> str | None:
    """Slack's own status line under a thread ("is thinking…"); an empty ``status`` clears it.

    None if Slack showed it, else Slack's error code (logged): where Slack refuses a status (a missing scope, a
    token or channel it does not allow), the caller shows its work another way. Never fatal.
    """
    try:
        client().assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status=status)
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "unknown_error")
        log.warning("status refused", extra={"status": status, "error": error})
        return error
    return None


def set_suggested_prompts(
    channel: str, thread_ts: str | None, prompts: Sequence[tuple[str, str]], *, title: str
) -> str | None:
    """The prompts a DM with the app offers (``(title, message)`` each; Slack shows up to four) under ``title``.
    None if Slack took them, else its error code (logged): never fatal. ``thread_ts`` only for the assistant
    pane's threads (``assistant_view``); an agent app (``agent_view``) passes None, as Slack requires."""
    listed = [{"title": neutralise(shown), "message": neutralise(message)} for shown, message in prompts]
    where = {"thread_ts": thread_ts} if thread_ts else {}
    return _assistant(client().assistant_threads_setSuggestedPrompts, "suggested prompts refused",
                      channel_id=channel, prompts=listed, title=title, **where)  # fmt: skip


def set_title(channel: str, thread_ts: str, title: str) -> str | None:
    """The title of an assistant thread (its name in the app's history). None, or Slack's error code (logged)."""
    return _assistant(client().assistant_threads_setTitle, "title refused",
                      channel_id=channel, thread_ts=thread_ts, title=neutralise(title))  # fmt: skip


def _assistant(method: Callable[..., Any], refused: str, **arguments: Any) -> str | None:
    try:
        method(**arguments)
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "unknown_error")
        log.warning(refused, extra={"error": error, "channel": arguments.get("channel_id")})
        return error
    return None


def react(channel: str, ts: str, name: str) -> bool:
    """Add a reaction; one already there is fine. False (logged) if Slack refused: reactions are never fatal."""
    return _reaction(client().reactions_add, channel, ts, name, fine="already_reacted")


def unreact(channel: str, ts: str, name: str) -> bool:
    """Remove a reaction; a missing one is fine. False (logged) if Slack refused."""
    return _reaction(client().reactions_remove, channel, ts, name, fine="no_reaction")


def _reaction(method: Callable[..., Any], channel: str, ts: str, name: str, *, fine: str) -> bool:
    try:
        method(channel=channel, timestamp=ts, name=name)
    except SlackApiError as exc:
        if exc.response.get("error") == fine:
            return True
        log.warning("reaction refused", extra={"reaction": name, "error": exc.response.get("error")})
        return False
    return True


def thread_messages(
    channel: str, thread_ts: str, *, limit: int = THREAD_READ_LIMIT, oldest: str | None = None
) -> list[dict[str, Any]]:
    """The thread's messages, oldest first, at most ``limit`` (the newest ones if there are more); with ``oldest``,
    its opening message then only the replies after ``oldest`` (Slack always answers the opening message first)."""
    messages: list[dict[str, Any]] = []
    cursor = None
    while True:
        response = client().conversations_replies(channel=channel, ts=thread_ts, oldest=oldest, limit=min(limit, 200),
                                                  cursor=cursor, include_all_metadata=True)  # fmt: skip
        messages.extend(response.get("messages") or [])
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not cursor or not response.get("has_more"):
            break
    if len(messages) > limit:
        messages = messages[:1] + messages[-(limit - 1) :]  # keep the opening message for context
    return messages


def thread_read(
    channel: str, thread_ts: str, *, limit: int = THREAD_READ_LIMIT
) -> tuple[list[dict[str, Any]], float | None]:
    """The thread's messages as ``thread_messages`` reads them, and None; or, when Slack rate-limits the read for
    longer than ``THREAD_READ_MAX_WAIT`` (``conversations.replies`` allows an app distributed outside the
    Marketplace one request a minute, 15 messages), the messages read before that and Slack's ``Retry-After``."""
    messages: list[dict[str, Any]] = []
    cursor = None
    with backpressure.waiting_at_most(THREAD_READ_MAX_WAIT):
        while True:
            try:
                response = client().conversations_replies(
                    channel=channel, ts=thread_ts, limit=min(limit, 200), cursor=cursor, include_all_metadata=True
                )
            except SlackApiError as exc:
                if exc.response.get("error") != "ratelimited" and exc.response.status_code != 429:
                    raise
                wait = backpressure.retry_after(exc.response)
                log.warning("thread read rate-limited; going on with what was read",
                            extra={"read": len(messages), "retry_after": wait})  # fmt: skip
                return _newest(messages, limit), wait
            messages.extend(response.get("messages") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not cursor or not response.get("has_more"):
                return _newest(messages, limit), None


def _newest(messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    return messages if len(messages) <= limit else messages[:1] + messages[-(limit - 1) :]


def posted_keys(channel: str, thread_ts: str, *, oldest: str | None = None) -> dict[str, str]:
    """Post keys already in the thread (with ``oldest``, its opening message's and those of the replies after
    ``oldest``), mapped to their message ts (read once, after a crash)."""
    return _keys(thread_messages(channel, thread_ts, limit=1000, oldest=oldest))


def posted_keys_after(channel: str, oldest: str, *, limit: int = 1000) -> dict[str, str]:
    """Post keys among the top-level messages of ``channel`` after ``oldest`` (a DM conversation answered at its
    top level: shared/slack/placement.py), mapped to their ts; read once, after a crash."""
    messages: list[dict[str, Any]] = []
    cursor = None
    while len(messages) < limit:
        response = client().conversations_history(channel=channel, oldest=oldest, limit=min(limit, 200),
                                                  cursor=cursor, include_all_metadata=True)  # fmt: skip
        messages.extend(response.get("messages") or [])
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not cursor or not response.get("has_more"):
            break
    return _keys(messages)


def _keys(messages: list[dict[str, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for message in messages:
        metadata = message.get("metadata") or {}
        if metadata.get("event_type") == POST_KEY_EVENT:
            key = (metadata.get("event_payload") or {}).get("key")
            if isinstance(key, str):
                found[key] = str(message["ts"])
    return found

"""The fake Slack's streamed messages: ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``.

Argument names and errors are Slack's: outside a DM a stream needs ``recipient_user_id`` and
``recipient_team_id`` (``missing_recipient_user_id`` / ``missing_recipient_team_id``); one call's ``markdown_text``
holds at most 12,000 characters and a message at most ``MAX_TEXT`` (``msg_too_long``); one call at most 50 chunks
(``invalid_chunks``) and ``stopStream`` at most 50 blocks (``invalid_blocks``); a stream ends on its own some
time after it started (Slack: about five minutes; here ``stream_seconds`` in the config, ``--stream-seconds`` or
``FAKESLACK_STREAM_SECONDS``), after which appends and the stop answer ``message_not_in_streaming_state``. A test
can make one channel refuse streams as a channel type Slack does not stream to (``refuse_streams``).

A streamed message is an ordinary bot message whose ``text`` grows with each markdown chunk; its task cards are
kept on it (``tasks``, by id, as the latest ``task_update`` said; ``display``, the ``task_display_mode``; ``plan``,
the latest ``plan_update`` title) and shown by the browser page.
"""

from __future__ import annotations

import time

from .state import MAX_TEXT, Json, Message, SlackError, Workspace, json_list, json_object, opt, req

MAX_MARKDOWN = 12_000
MAX_CHUNKS = 50  # Slack: one call's chunks, and stopStream's blocks, at most 50 each
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
STREAM_REFUSALS = frozenset({"channel_type_not_supported", "missing_scope", "not_allowed_token_type",
                             "feature_not_enabled"})  # fmt: skip


def chat_start_stream(ws: Workspace, args: Json) -> Json:
    channel = req(args, "channel", "channel_not_found")
    if refused := ws.stream_refusals.get(channel):
        raise SlackError(refused)
    thread_ts = req(args, "thread_ts", "invalid_thread_ts")
    if ws.find(channel, thread_ts) is None:
        raise SlackError("invalid_thread_ts")
    if ws.channel_type(channel) != "im":
        if not opt(args, "recipient_user_id"):
            raise SlackError("missing_recipient_user_id")
        if not opt(args, "recipient_team_id"):
            raise SlackError("missing_recipient_team_id")
    if opt(args, "task_display_mode") not in (None, "timeline", "plan"):
        raise SlackError("invalid_arguments")
    cfg = ws.config
    message = Message(channel, ws.next_ts(), cfg.bot_user_id, "", thread_ts=thread_ts, bot_id=cfg.bot_id)
    message.app_id = cfg.app_id
    message.stream = {"until": time.time() + cfg.stream_seconds, "tasks": {},
                      "display": opt(args, "task_display_mode") or "timeline", "plan": None}  # fmt: skip
    _absorb(message, args)
    ws.add_message(message)
    ws.statuses.pop(f"{channel}/{message.thread_ts}", None)  # the app replied: Slack clears the thread's status
    return {"ok": True, "channel": channel, "ts": message.ts}


def chat_append_stream(ws: Workspace, args: Json) -> Json:
    message = _streaming(ws, args)
    if opt(args, "markdown_text") is None and args.get("chunks") is None:
        raise SlackError("no_text")
    _absorb(message, args)
    return {"ok": True, "channel": message.channel, "ts": message.ts}


def chat_stop_stream(ws: Workspace, args: Json) -> Json:
    message = _streaming(ws, args)
    blocks = json_list(args, "blocks", "invalid_blocks")
    if blocks is not None and len(blocks) > MAX_CHUNKS:
        raise SlackError("invalid_blocks")
    metadata = json_object(args, "metadata", "invalid_metadata")
    if metadata is not None and not (isinstance(metadata.get("event_type"), str) and "event_payload" in metadata):
        raise SlackError("invalid_metadata")
    _absorb(message, args)  # after every check: nothing of a refused stop shows, and the stream stays open
    message.blocks = blocks if blocks is not None else message.blocks
    message.metadata = metadata if metadata is not None else message.metadata
    assert message.stream is not None
    message.stream["until"] = None  # finished: an ordinary message from now on
    return {"ok": True, "channel": message.channel, "ts": message.ts, "message": ws.render(message)}


def _streaming(ws: Workspace, args: Json) -> Message:
    channel = req(args, "channel", "channel_not_found")
    message = ws.find(channel, req(args, "ts", "message_not_found"))
    if message is None:
        raise SlackError("message_not_found")
    if message.bot_id != ws.config.bot_id:
        raise SlackError("message_not_owned_by_app")
    until = (message.stream or {}).get("until")
    if until is None or time.time() >= until:
        raise SlackError("message_not_in_streaming_state")
    return message


def _chunks(args: Json) -> list[Json]:
    chunks = json_list(args, "chunks", "invalid_chunks") or []
    if len(chunks) > MAX_CHUNKS:
        raise SlackError("invalid_chunks")
    return chunks


def _absorb(message: Message, args: Json) -> None:
    """Check every chunk first (nothing of a refused call shows), then add them to the message."""
    chunks = _chunks(args)
    text = opt(args, "markdown_text")
    if text is not None and chunks:
        raise SlackError("invalid_arguments")  # markdown_text or chunks, not both
    if text is not None:
        chunks = [{"type": "markdown_text", "text": text}]
    added = ""
    for chunk in chunks:
        kind = chunk.get("type")
        if kind not in CHUNK_TYPES:
            raise SlackError("invalid_chunks")
        if kind == "markdown_text":
            piece = chunk.get("text")
            if not isinstance(piece, str):
                raise SlackError("invalid_chunks")
            added += piece
            if len(added) > MAX_MARKDOWN:  # one call's markdown_text, over all its chunks
                raise SlackError("msg_too_long")
        if kind == "task_update" and (not chunk.get("id") or not chunk.get("title")
                                      or chunk.get("status") not in TASK_STATUSES):  # fmt: skip
            raise SlackError("invalid_chunks")
    if len(message.text) + len(added) > MAX_TEXT:
        raise SlackError("msg_too_long")
    message.text += added
    assert message.stream is not None
    for chunk in chunks:
        if chunk.get("type") == "task_update":
            message.stream["tasks"][str(chunk["id"])] = dict(chunk)
        if chunk.get("type") == "plan_update":
            message.stream["plan"] = chunk.get("title")

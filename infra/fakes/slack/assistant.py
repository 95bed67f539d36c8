"""Slack's agent surface in the fake: agent-view DMs and assistant threads (opened, titled, offered prompts) and
the markdown block.

Opening the app's assistant pane makes Slack post a thread root in the person's DM with the app (subtype
``assistant_app_thread``) and send ``assistant_thread_started``; moving to another channel with the pane open sends
``assistant_thread_context_changed``. ``assistant.threads.setSuggestedPrompts`` and ``assistant.threads.setTitle``
take Slack's argument names (``channel_id``, ``thread_ts``, ``prompts`` of ``{title, message}``, ``title``) and
answer Slack's errors. A ``markdown`` block holds standard Markdown, at most 12,000 characters for all of a
message's markdown blocks together.
"""

from __future__ import annotations

from .state import Json, SlackError, Workspace, json_list, opt, req

MARKDOWN_CHARS = 12_000  # Slack's limit for the text of all markdown blocks in one message
MAX_PROMPTS = 4  # Slack shows at most four suggested prompts


def check_markdown_blocks(blocks: list[Json] | None) -> None:
    """A markdown block needs a non-empty ``text`` of at most 12,000 characters (``invalid_blocks``); a message's
    markdown blocks together hold at most as much (``msg_blocks_too_long``)."""
    texts = [b.get("text") for b in blocks or [] if b.get("type") == "markdown"]
    if any(not isinstance(t, str) or not t or len(t) > MARKDOWN_CHARS for t in texts):
        raise SlackError("invalid_blocks")
    if sum(len(str(t)) for t in texts) > MARKDOWN_CHARS:
        raise SlackError("msg_blocks_too_long")


def _thread(ws: Workspace, args: Json, *, required: bool) -> tuple[str, str | None]:
    channel = req(args, "channel_id", "channel_not_found")
    if channel not in ws.channels:
        raise SlackError("channel_not_found")
    thread_ts = opt(args, "thread_ts")
    if thread_ts is None and required:
        raise SlackError("invalid_thread_ts")
    if thread_ts is not None and ws.find(channel, thread_ts) is None:
        raise SlackError("invalid_thread_ts")
    return channel, thread_ts


def set_suggested_prompts(ws: Workspace, args: Json) -> Json:
    """Up to four ``{title, message}`` prompts (and an optional ``title`` for the list) on an assistant thread;
    without ``thread_ts`` they go to the channel's latest thread, as Slack's docs say."""
    channel, thread_ts = _thread(ws, args, required=False)
    prompts = json_list(args, "prompts", "invalid_arguments")
    if not prompts or len(prompts) > MAX_PROMPTS:
        raise SlackError("invalid_arguments")
    for prompt in prompts:
        if not all(isinstance(prompt.get(key), str) and prompt[key] for key in ("title", "message")):
            raise SlackError("invalid_arguments")
    shown = {"prompts": [{"title": p["title"], "message": p["message"]} for p in prompts],
             "prompts_title": opt(args, "title")}  # fmt: skip
    if thread_ts is None:  # the DM's own prompts (agent view), and its latest thread's (the assistant pane's docs)
        ws.assistant_threads.setdefault(channel, {}).update(shown)
        roots = [m for m in ws.channels.get(channel, []) if m.thread_ts is None]
        if not roots:
            return {"ok": True}
        thread_ts = roots[-1].ts
    ws.assistant_threads.setdefault(f"{channel}/{thread_ts}", {}).update(shown)
    return {"ok": True}


def set_title(ws: Workspace, args: Json) -> Json:
    channel, thread_ts = _thread(ws, args, required=True)
    title = opt(args, "title")
    if not title:
        raise SlackError("invalid_arguments")
    ws.assistant_threads.setdefault(f"{channel}/{thread_ts}", {})["title"] = title
    return {"ok": True}


API = {
    "assistant.threads.setSuggestedPrompts": set_suggested_prompts,
    "assistant.threads.setTitle": set_title,
}

"""Slack's agent surfaces: what the app does when someone opens it, and when they look elsewhere with it open.

The agent messaging experience (``agent_view``, what the manifest declares): opening the app's Messages tab
(``app_home_opened``, ``tab: "messages"``) sets the suggested prompts and their title on the DM, with no
``thread_ts`` (Slack silently drops a call that names one for an agent app); every DM message and thread there is a
conversation with the agent (no ``assistant_app_thread`` root), routed as any DM; ``app_context_changed`` is
acknowledged like the pane's context change. The older assistant pane (``assistant_view``) keeps working.

Opening the pane starts an assistant thread in the person's DM with the app; the ingress then sets the thread's
suggested prompts (``ASSISTANT_PROMPTS``) and a title ("New request", which the first request typed there replaces
as its session opens), two Slack calls made right away rather than through a Cloud Task (a task would cost a queue
round trip and a cold ``agent_session`` for two small calls). The event is recorded once they are made
(``events/{event_id}``, ``create()``): Slack's retry of it then does nothing, since repeating the calls after the
person has typed would rename the thread "New request" again and offer its prompts under the conversation; a
delivery that died before making them leaves no record, so that the retry makes them, unless the person has typed in
the thread meanwhile (a session there): then the retry offers nothing. A message typed in the pane is a
DM in that thread (``message.im`` with its ``thread_ts``) and goes through ``intake.route`` like any other DM.
On the Slack ingress path, so it never imports google-genai.
"""

from __future__ import annotations

import logging

from shared import config
from shared.slack import client as slack
from shared.slack.events import AssistantThread
from shared.state import events, sessions

log = logging.getLogger(__name__)

THREAD_TITLE = "New request"  # until someone writes: Slack lists the thread under it in the app's history
PROMPTS_TITLE = "Try asking"


def opened(thread: AssistantThread) -> dict[str, str | bool]:
    """The pane was opened: offer the configured prompts and name the thread, once however often Slack delivers the
    event. Slack refusing either (a missing ``assistant:write`` scope, a thread it no longer knows) is logged and
    answered 200: a retry would not help.

    The event is recorded once its calls are made: a delivery that died before them (its instance killed, Slack
    down) leaves nothing, and Slack's retry makes them; a retry that finds the record does nothing. Two deliveries
    at once may both make the calls, which set the same prompts and title: the same as one."""
    if events.event_seen(thread.event_id):
        log.info("duplicate event delivery", extra={"event_id": thread.event_id, "channel": thread.channel})
        return {"ok": True, "duplicate": True}
    if thread.thread_ts and sessions.any_session_in_thread(thread.channel, thread.thread_ts):
        # Slack's retry (X-Slack-Retry-Num, up to minutes later) of an opening whose first delivery died before its
        # calls, after the person typed there: the thread has its name and its conversation, which a "New request"
        # and the prompts would overwrite. (A first delivery never finds one: the opening makes the thread.)
        events.claim_event(thread.event_id, kind="assistant_opened")
        log.info("pane opening retried after its thread's conversation began; nothing offered",
                 extra={"channel": thread.channel, "thread_ts": thread.thread_ts})  # fmt: skip
        return {"ok": True, "ignored": "the thread's conversation has begun"}
    detail = _offer(thread)
    events.claim_event(thread.event_id, kind="assistant_opened")
    return detail


def _offer(thread: AssistantThread) -> dict[str, str | bool]:
    detail: dict[str, str | bool] = {"ok": True}
    detail["assistant_thread" if thread.thread_ts else "agent_dm"] = thread.thread_ts or thread.channel
    prompts = config.settings().assistant_prompts
    if prompts:
        refused = slack.set_suggested_prompts(thread.channel, thread.thread_ts, prompts, title=PROMPTS_TITLE)
        if refused:
            detail["prompts_refused"] = refused
    if thread.thread_ts:  # the agent view names no thread here: its threads are the person's own messages
        refused = slack.set_title(thread.channel, thread.thread_ts, THREAD_TITLE)
        if refused:
            detail["title_refused"] = refused
    log.info("assistant thread opened", extra={"channel": thread.channel, "thread_ts": thread.thread_ts, **detail})
    return detail


def context_changed(thread: AssistantThread) -> dict[str, str | bool]:
    """The person moved to another channel with the pane open. Nothing changes: a session reads only its own
    thread, never the channel someone happens to be viewing (that would need that channel's history scope and
    would read a conversation nobody asked it to), so the event is acknowledged and logged."""
    log.info("assistant thread context changed", extra={"channel": thread.channel, "thread_ts": thread.thread_ts,
                                                         "context_channel": thread.context_channel})  # fmt: skip
    return {"ok": True, "ignored": "assistant context change: sessions read only their own thread"}

"""The streamed side of a session run: its thread surface with an answer stream, and a model turn whose text goes
to Slack as it is generated (shared/slack/stream.py holds the Slack side).

The stream's message is recorded on the session before any text reaches it; a takeover that finds a recorded
stream Slack never finished (no post key on it) takes it back and lets its answer replace it, so a crash
mid-stream never leaves two answers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from google.genai import types

from shared import config
from shared.agent import model as gemini
from shared.slack.stream import AnswerStream
from shared.slack.surface import ThreadSurface
from shared.state import origin, sessions
from shared.state.session_model import Session

log = logging.getLogger(__name__)


def surface_for(session: Session, *, takeover: bool) -> ThreadSurface:
    """The session's thread surface; a top-level session streams its answers unless configured not to.

    A conversation answered at the top level of a DM (shared/slack/placement.py) does not stream: Slack's
    ``chat.startStream`` streams a reply to a message (``thread_ts``, which slack-sdk requires; "streamed messages
    should always be replies to a user request"), so a stream there would put the answer back into a thread. Its
    answer is posted whole in the conversation, with the status line while it works."""
    request = origin.request_ts(session)  # a continuation marks the request it continues, not what resumed it
    surface = ThreadSurface(session.origin.channel, session.origin.thread_ts, request, quiet=session.reports_to_parent)
    settings = config.settings()
    if not surface.quiet and settings.slack_stream and surface.reply_ts is not None:

        def opened(ts: str) -> None:
            sessions.set_stream_ts(session.session_id, ts, by=session)
            session.stream.ts = ts
            surface.status = None  # Slack clears a thread's status when the app replies: set it again next step

        surface.stream = AnswerStream(session.origin.channel, session.origin.thread_ts, recipient=session.requester,
                                      on_open=opened, buffer_chars=settings.slack_stream_buffer_chars,
                                      stream_seconds=settings.slack_stream_seconds,
                                      settle=surface.settled)  # fmt: skip
    if takeover:
        surface.recover()
        left = session.stream.ts
        if surface.stream is not None and left and left not in surface.posted.values():
            surface.stream.adopt(left)
    return surface


def model_turn(
    surface: ThreadSurface, history: Sequence[types.Content], *, system: str,
    tools: Sequence[types.FunctionDeclaration],
) -> types.GenerateContentResponse:  # fmt: skip
    """One model turn, its text streamed into the thread where the surface streams (whole otherwise)."""
    stream = surface.stream
    if stream is None or not stream.streaming:
        return gemini.generate(history, system=system, tools=tools)
    stream.begin_turn()
    try:
        response = _streamed(stream, history, system=system, tools=tools)
    except Exception:
        stream.retract()
        raise
    content = response.candidates[0].content if response.candidates else None
    calls = any(p.function_call for p in (content.parts if content else None) or [])
    stream.end_turn(answered=not calls)
    return response


def _streamed(stream: AnswerStream, history: Sequence[types.Content], *, system: str,
              tools: Sequence[types.FunctionDeclaration]) -> types.GenerateContentResponse:  # fmt: skip
    try:
        return gemini.generate_stream(history, system=system, tools=tools, on_text=stream.text)
    except gemini.StreamUnsupported as exc:  # an endpoint without the streaming call: the turn whole, shown whole
        log.warning("the model endpoint does not stream; asking for the turn whole", extra={"error": str(exc)})
    response = gemini.generate(history, system=system, tools=tools)
    whole = response.candidates[0].content if response.candidates else None
    for part in (whole.parts if whole else None) or []:
        if part.text and not part.thought and not part.function_call:
            stream.text(part.text)
    return response

"""The built-in tools: ask the operator, post a progress update, read the thread, fetch a URL.

Their docstrings are what the model reads to decide when to call them (seed 002:
the model is the only tool selector), so they say precisely when each is right.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, MarkdownTextObject, SectionBlock

from shared import slack, store
from shared.models import Question, QuestionStatus, SessionStatus
from shared.tools import ToolError, context, tool

MAX_OPTIONS = 10  # buttons per question; Slack allows 25 per actions block, people read far fewer
QUESTION_REACTION = "speech_balloon"


def question_text(question: str, options: list[str]) -> str:
    """The plain-text form of a question: the notification text, and the fallback where blocks do not render."""
    lines = [f":speech_balloon: *Question for the operator:* {question}"]
    lines += [f"{i}. {option}" for i, option in enumerate(options, start=1)]
    if options:
        lines.append("Reply in this thread with the number or the option, or press a button.")
    else:
        lines.append("Reply in this thread to answer.")
    return "\n".join(lines)


def question_blocks(question_id: str, question: str, options: list[str]) -> list[Any]:
    """Block Kit for a question: the text, and one button per option whose value names the question."""
    blocks: list[Any] = [SectionBlock(text=MarkdownTextObject(text=f":speech_balloon: *Question:* {question}"))]
    if options:
        blocks.append(
            ActionsBlock(
                block_id=f"question:{question_id}",
                elements=[
                    ButtonElement(text=option[:75], action_id=f"answer_{i}", value=f"{question_id}|{i}")
                    for i, option in enumerate(options, start=1)
                ],
            )
        )
    return blocks


def question_id_for(session_id: str, seq: int, call_index: int) -> str:
    """Derived from the step that asked, so a retried step finds the question it already wrote."""
    return f"q-{session_id}-{seq}-{call_index}"


def cancel_older_questions(channel: str, thread_ts: str, *, keep: str, asker: str) -> None:
    """One open blocking question per thread: a new one cancels the older ones, and their posts say so.

    A paused session other than ``asker`` that waited on a cancelled question can never resume: it is closed.
    """
    for older in store.open_questions_in_thread(channel, thread_ts):
        if older.question_id == keep or not older.blocking:
            continue
        if not store.close_question(older.question_id, QuestionStatus.CANCELLED):
            continue
        if older.post_ts:
            text = f":no_entry_sign: ~{older.text}~\n_Cancelled: a newer question replaces it._"
            slack.update(channel, older.post_ts, text)
            slack.unreact(channel, older.post_ts, QUESTION_REACTION)
        if older.session_id != asker:
            store.end_session(older.session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED)


@tool(outward=False, top_level_only=True, posts=True)
def ask_operator(question: str, options: list[str] | None = None, blocking: bool = True) -> dict[str, Any]:
    """Ask the human operator a question in the Slack thread.

    Use this only for a genuine unknown that you cannot find out yourself with your
    other tools: a decision, a preference, a permission or a fact only a person has
    (for example "sqlite or postgres?" or "may I restart the production server?").
    Never ask for something you can look up or reasonably decide.

    Args:
        question: The question, specific and self-contained.
        options: Up to 10 short choices, shown as buttons; leave empty for a free-text answer.
        blocking: True (the default) when you cannot go on without the answer: this session
            ends now and resumes when the operator answers. False when you can keep working;
            the answer reaches you later as a note.
    """
    ctx = context()
    choices = [o.strip() for o in options or [] if o.strip()]
    if len(choices) > MAX_OPTIONS:
        raise ToolError(f"at most {MAX_OPTIONS} options")
    if not question.strip():
        raise ToolError("the question is empty")
    session = ctx.session
    qid = question_id_for(session.session_id, ctx.seq, ctx.call_index)
    if blocking:
        cancel_older_questions(session.channel, session.thread_ts, keep=qid, asker=session.session_id)
    key = ctx.post_key(":question")
    post_ts = ctx.posted.get(key) or slack.post(
        session.channel, session.thread_ts, question_text(question, choices), key=key,
        blocks=question_blocks(qid, question, choices),
    )  # fmt: skip
    ctx.post_ts.append(post_ts)
    asked = store.create_question(
        Question(
            question_id=qid,
            session_id=session.session_id,
            transcript_id=session.transcript,
            channel=session.channel,
            thread_ts=session.thread_ts,
            text=question,
            options=choices,
            blocking=blocking,
            call_id=ctx.call_id,
            asked_at=store.now(),
            post_ts=post_ts,
            requester=session.trigger_user,
        )
    )
    slack.react(session.channel, post_ts, QUESTION_REACTION)  # the question stands even if this fails
    if blocking:
        ctx.pause = asked
        return {"status": "asked", "question_id": qid, "note": "The session pauses until the operator answers."}
    return {
        "status": "asked",
        "question_id": qid,
        "note": "Keep working with your best judgement; the answer will reach you as a note if it arrives.",
    }


@tool(outward=False, posts=True)
def post_update(text: str) -> dict[str, Any]:
    """Post a short progress update in the Slack thread while you keep working.

    Use it for long tasks, to tell the requester what you are doing. Your final answer
    is posted for you when you reply without calling a tool, so do not use this for it.

    Args:
        text: The update, in Markdown.
    """
    from shared.mrkdwn import to_mrkdwn

    ctx = context()
    key = ctx.post_key()
    ts = ctx.posted.get(key) or slack.post(ctx.session.channel, ctx.session.thread_ts, to_mrkdwn(text), key=key)
    ctx.post_ts.append(ts)
    return {"posted": True, "ts": ts}


@tool(outward=False)
def read_thread(limit: int = 50) -> dict[str, Any]:
    """Read the latest messages of this Slack thread, oldest first.

    Args:
        limit: How many of the most recent messages to return (1 to 200).
    """
    ctx = context()
    count = max(1, min(limit, 200))
    messages = slack.thread_messages(ctx.session.channel, ctx.session.thread_ts)[-count:]
    return {
        "messages": [
            {"ts": m.get("ts"), "user": m.get("user") or m.get("bot_id"), "text": m.get("text", "")[:4000]}
            for m in messages
        ]
    }


@tool(outward=True)
def fetch_url(url: str) -> dict[str, Any]:
    """Fetch a public web page or API over HTTP(S) with GET and return its text.

    Private, internal and cloud metadata addresses are refused. Large pages are truncated.

    Args:
        url: An http:// or https:// URL.
    """
    from shared import fetch

    try:
        return fetch.describe(fetch.fetch(url))
    except fetch.FetchError as exc:
        raise ToolError(str(exc)) from exc

"""How a session opens its turn of the transcript: the thread and request for a mention, the operator's answer
for a continuation, the silent session's audit log for a narration; a request typed in an assistant pane's new
thread names that thread as it opens.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from google.genai import types
from slack_sdk.errors import SlackApiError

from shared.agent import prompts
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import Responses, pending_calls, pending_turn, to_json
from shared.agent.waits.resuming import Resuming, WaitKind, WaitOn
from shared.errors import ProductError
from shared.limits import MAX_REQUEST_CHARS, TOO_LARGE_REQUEST_CHARS, capped
from shared.slack import client as slack
from shared.state import questions as stored
from shared.state import sessions, steps
from shared.state.claim_reads import ClaimReads
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, Question, SessionKind, SessionStatus, Step, StepKind
from shared.state.session_model import Session

log = logging.getLogger(__name__)

ROOT_SUBTYPE = "assistant_app_thread"  # the subtype of the message Slack starts an assistant pane's thread with
MAX_TITLE_CHARS = 60


class MissingQuestion(ProductError):
    """A continuation names a question that is not stored."""


def opening_content(session: Session, transcript: list[Step], *,
                    question: Question | None = None) -> tuple[StepKind, types.Content | Responses,
                                                               list[Audit]]:  # fmt: skip
    """The first step this session writes: what it starts from (``question``: a continuation's, if already read)."""
    # Failure narration wins over resumption (seed 000): a retry never resumes a pending ask.
    if session.kind == SessionKind.RETRY:
        return StepKind.PROMPT, _narration(session), []
    if session.kind == SessionKind.CHILD:
        return StepKind.PROMPT, _user(prompts.child_task(session.text, depth=session.tree.depth)), []
    if session.kind == SessionKind.CONTINUATION and session.late_note is not None:
        return StepKind.NOTES, _user(prompts.notes_text([session.late_note])), [Audit(AuditType.NOTES, now(), count=1)]
    if session.kind == SessionKind.CONTINUATION:
        question = question or stored.get_question(session.question_id or "")
        if question is None:
            raise MissingQuestion(f"continuation {session.session_id} names no stored question")
        return StepKind.ANSWER, answer_content(question, transcript), [Audit(AuditType.ANSWER, now())]
    limited: float | None = None
    try:  # a long rate limit (Slack's one read a minute): the session goes on with what it has, and says so
        thread, limited = slack.thread_read(session.origin.channel, session.origin.thread_ts)
    except SlackApiError as exc:  # e.g. the bot is not in the channel: work from the request alone
        log.warning("could not read the thread", extra={"error": exc.response.get("error")})
        thread = []
    name_after_request(session, thread)
    text = prompts.thread_prompt([m for m in thread if m.get("ts") != session.origin.trigger_ts], request=session.text,
                                 requester=session.origin.trigger_user, limited=limited,
                                 own=slack.bot_user_id() if any(m.get("bot_id") for m in thread) else None)  # fmt: skip
    return StepKind.PROMPT, _user(text), []


def child_opening(session: Session, reads: ClaimReads) -> Step | None:
    """A delegated child's first step, its task, for the claim that takes it fresh to store in its own commit
    (``claim_step``): made from the session alone, it needs no read of its own, and the step commit it replaces (a
    transaction of three round trips) would check only what the claim checks or finds settled on the same document
    (its worker, its status, no stop, no results or questions of its own children yet). None for anything else: a
    child that was claimed before, waits, was asked to stop or brings a task too large to use (its run opens it)."""
    fresh = (
        session.kind == SessionKind.CHILD and session.status == SessionStatus.QUEUED and session.next_seq == 0
        and not session.waiting and not session.stop_requested and len(session.text) <= TOO_LARGE_REQUEST_CHARS
    )  # fmt: skip
    if not fresh:
        return None
    kind, content, audit = opening_content(session, [])
    assert isinstance(content, types.Content)  # a child's opening is its task, a user turn
    return Step(seq=0, session_id=session.session_id, kind=kind, content=to_json(content), audit=audit, at=now())


def answer_content(question: Question, transcript: list[Step]) -> types.Content | Responses:
    """The operator's answer: the function response of the pending call that asked (the call at the question's
    position; none if a re-run already stored it), or news if the asker had finished (a non-blocking question)."""
    if not question.blocking:
        return _user(prompts.late_answer(question))
    answer = answer_of(question)
    if question.seq is not None and question.call_index is not None:
        on = WaitOn(WaitKind.QUESTION, question.question_id)
        resuming = Resuming(pending_turn(transcript), question.seq, {question.call_index: on})
        resuming.arrive(on, ToolResult.ok(answer))
        return resuming.responses
    names = {call.id: call.name for call in pending_calls(transcript)}  # a question stored before calls had ids
    name = names.get(question.call_id) or "ask_operator"
    response = types.FunctionResponse(id=question.call_id, name=name, response=ToolResult.ok(answer).to_dict())
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def answer_of(question: Question) -> dict[str, Any]:
    """What the call that asked gets: the operator's answer (and how it matched the options)."""
    answer: dict[str, Any] = {"answer": question.answer, "answered_by": question.answered_by}
    if question.options:
        answer["matched_option"] = question.matched_option
        if question.matched_option is None:
            answer["note"] = "The reply matched none of the options; read it as free text."
    return answer


def _narration(session: Session) -> types.Content:
    """The audit log of the silent session, the ground truth a narration reports from."""
    silent = sessions.get_session(session.narrated_session_id or "")
    records = steps.audit_of(silent) if silent else []
    lines = [prompts.as_data(**r.to_doc()) for r in records] or ["(no records)"]  # a page's text makes no record
    request = prompts.as_data(text=capped(session.text, MAX_REQUEST_CHARS))
    text = prompts.NARRATE.format(request=request, reason=session.retry_reason or "unknown", audit="\n".join(lines))
    return _user(text)


def _user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def name_after_request(session: Session, thread: list[dict[str, Any]]) -> None:
    """The first request typed in an assistant pane's thread names it, in place of the "New request" the pane
    opened with. Called by a session as it opens, with the thread it read anyway: the root's subtype says whether
    this is a pane's thread, and a thread holding anything between its root and this request has been named already
    (what came after it, a second message typed before this session read the thread, names nothing). A refusal is
    logged (never fatal)."""
    root = thread[0] if thread else {}
    if root.get("subtype") != ROOT_SUBTYPE or root.get("ts") != session.origin.thread_ts:
        return
    request = Decimal(session.origin.trigger_ts)
    if any(Decimal(m.get("ts") or 0) < request for m in thread if m.get("ts") != session.origin.thread_ts):
        return
    line = next((line.strip() for line in session.text.splitlines() if line.strip()), "")
    if line:
        title = line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1] + "…"
        slack.set_title(session.origin.channel, session.origin.thread_ts, title)

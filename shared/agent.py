"""The bounded agent loop: model turn → persist → run tools → persist, until an answer, a pause or a budget.

Every step is persisted before the next one starts, so a crash loses at most the
step in flight and a takeover resumes from the stored transcript. Posts carry a
key derived from the step that made them; after a crash, the keys Slack already
has are read once, so a re-run step does not post twice.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.genai import types
from slack_sdk.errors import SlackApiError

from shared import builtin_tools, config, followup, gate, gemini, prompts, slack, store, team_tools, tools
from shared.models import Session, SessionKind, SessionStatus, Step
from shared.mrkdwn import to_slack_messages
from shared.transcript import contents_of, pending_calls, shorten_tool_results, to_json

log = logging.getLogger(__name__)

WORKING, DONE, FAILED = "eyes", "white_check_mark", "warning"

_ = (builtin_tools, team_tools)  # imported for their @tool registrations


@dataclass
class Budget:
    max_turns: int
    max_tool_calls: int
    wall_seconds: float
    started: float = field(default_factory=time.monotonic)

    def exhausted(self, turns: int, tool_calls: int) -> str | None:
        """Why the session must wrap up now, or None."""
        if turns >= self.max_turns:
            return f"{self.max_turns} model turns"
        if tool_calls >= self.max_tool_calls:
            return f"{self.max_tool_calls} tool calls"
        if time.monotonic() - self.started >= self.wall_seconds:
            return f"{int(self.wall_seconds)} seconds"
        return None


class Runner:
    """Runs one claimed session to a terminal state (or a pause)."""

    def __init__(self, session: Session, *, takeover: bool, started_at: datetime | None = None) -> None:
        settings = config.settings()
        self.session = session
        self.takeover = takeover
        self.lease = settings.session_lease_seconds
        elapsed = (store.now() - started_at).total_seconds() if started_at else 0.0
        self.budget = Budget(
            settings.session_max_turns,
            settings.session_max_tool_calls,
            settings.session_wall_seconds,
            started=time.monotonic() - max(0.0, elapsed),
        )
        # A mention on its first claim has no steps yet (next_seq moves with every step): skip the query.
        fresh = session.kind == SessionKind.MENTION and not takeover and session.next_seq == 0
        self.steps: list[Step] = [] if fresh else store.load_steps(session.transcript)
        # A continuation appends to its parent's transcript: its first step follows the last stored one.
        session.next_seq = max(session.next_seq, self.steps[-1].seq + 1 if self.steps else 0)
        # After a crash, learn which of this session's posts Slack already has (one thread read).
        self.posted: dict[str, str] = slack.posted_keys(session.channel, session.thread_ts) if takeover else {}
        top_level = session.kind in {SessionKind.MENTION, SessionKind.CONTINUATION}
        # A narration reports from the audit log only: it gets no tools.
        self.tools = [] if session.kind == SessionKind.RETRY else tools.available(top_level=top_level)
        self.allowed = {t.name for t in self.tools}
        self.notes: list[dict[str, Any]] = list(session.notes)  # queued for the next model turn

    # --- persistence -----------------------------------------------------------------------
    def _commit(
        self,
        kind: str,
        content: types.Content | None,
        audit: list[dict[str, Any]],
        consumed: list[dict[str, Any]] | None = None,
        wait_for_notes: bool = True,
        **fields: Any,
    ) -> Step:
        step = Step(
            seq=self.session.next_seq,
            session_id=self.session.session_id,
            kind=kind,
            content=to_json(content) if content is not None else None,
            audit=audit,
            at=store.now(),
        )
        notes = store.commit_step(
            self.session,
            step,
            lease_seconds=self.lease,
            fields=fields,
            consumed_notes=consumed,
            wait_for_notes=wait_for_notes,
        )
        self.steps.append(step)
        self.notes = notes
        return step

    def _post(self, text: str, key: str) -> list[str]:
        """Post ``text`` (Markdown) in the thread as one or more messages; skip parts Slack already has."""
        stamps = []
        for i, chunk in enumerate(to_slack_messages(text) or ["(no answer)"]):
            part_key = f"{key}:{i}"
            ts = self.posted.get(part_key) or slack.post(
                self.session.channel, self.session.thread_ts, chunk, key=part_key
            )
            self.posted[part_key] = ts
            stamps.append(ts)
        return stamps

    def _react_end(self, reaction: str) -> None:
        slack.unreact(self.session.channel, self.session.trigger_ts, WORKING)
        slack.react(self.session.channel, self.session.trigger_ts, reaction)

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> SessionStatus:
        slack.react(self.session.channel, self.session.trigger_ts, WORKING)
        if not any(s.session_id == self.session.session_id for s in self.steps):
            self._start()
        while True:
            calls = pending_calls(self.steps)
            if calls and self._owns_pending():
                paused = self._run_tools(calls)
                if paused:
                    return SessionStatus.PAUSED
                continue
            if self.notes:
                self._fold_notes()
            reason = self.budget.exhausted(self.session.turns, self.session.tool_calls)
            if reason:
                return self._final_without_tools(prompts.WRAP_UP.format(reason=reason), kind="wrap_up")
            try:
                response = self._model_turn(with_tools=True)
            except gemini.ContextTooLong:
                return self._final_without_tools(prompts.TOO_LONG, kind="too_long", minimal=True)
            except gemini.ModelUnavailable as exc:
                return self._fail(f"the AI model is unavailable right now ({exc})")
            except gemini.MalformedResponse as exc:
                # Tell the model what was wrong, as it would hear a bad tool call, and let it try again.
                note = f"Your last reply could not be read ({exc}). Function call arguments must be a JSON object."
                self._commit(
                    "malformed",
                    types.Content(role="user", parts=[types.Part(text=note)]),
                    [{"type": "model", "error": str(exc), "calls": [], "at": store.now()}],
                    turns=self.session.turns + 1,
                )
                continue
            if response is None:
                return SessionStatus.DONE

    def _fold_notes(self) -> None:
        """Hand the model what arrived while it worked: answers to its non-blocking questions, thread messages."""
        lines = []
        for note in self.notes:
            if note.get("kind") == "answer":
                lines.append(
                    f"The operator <@{note.get('user')}> answered your question {note.get('question')!r}: "
                    f"{note.get('text')}"
                )
            else:
                lines.append(f"<@{note.get('user')}> wrote in the thread while you worked: {note.get('text')}")
        text = "Notes that arrived while you were working:\n" + "\n".join(f"- {line}" for line in lines)
        consumed = list(self.notes)
        audit = [{"type": "notes", "count": len(consumed), "at": store.now()}]
        self._commit("notes", types.Content(role="user", parts=[types.Part(text=text)]), audit, consumed=consumed)

    def _owns_pending(self) -> bool:
        """Pending calls belong to this session unless they are a paused ask awaiting a continuation."""
        return self.steps[-1].session_id == self.session.session_id

    def _start(self) -> None:
        # Failure narration wins over resumption (seed 000): a retry never resumes a pending ask.
        if self.session.kind == SessionKind.RETRY:
            self._commit("prompt", self._narration_prompt(), [])
            return
        if self.session.kind == SessionKind.CONTINUATION:
            self._commit("answer", self._answer_content(), [{"type": "answer", "at": store.now()}])
            return
        try:
            thread = slack.thread_messages(self.session.channel, self.session.thread_ts)
        except SlackApiError as exc:  # e.g. the bot is not in the channel: work from the request alone
            log.warning("could not read the thread", extra={"error": exc.response.get("error")})
            thread = []
        text = prompts.thread_prompt(
            [m for m in thread if m.get("ts") != self.session.trigger_ts],
            request=self.session.text,
            requester=self.session.trigger_user,
            bot_user_id=None,
        )
        self._commit("prompt", types.Content(role="user", parts=[types.Part(text=text)]), [])

    def _narration_prompt(self) -> types.Content:
        """The audit log of the silent session, the ground truth a narration reports from."""
        parent = store.get_session(self.session.parent_session_id or "")
        records = store.audit_of(parent) if parent else []
        lines = [json.dumps(r, default=str, ensure_ascii=False) for r in records] or ["(no records)"]
        text = prompts.NARRATE.format(
            request=self.session.text, reason=self.session.retry_reason or "unknown", audit="\n".join(lines)
        )
        return types.Content(role="user", parts=[types.Part(text=text)])

    def _answer_content(self) -> types.Content:
        """The operator's answer, as the function response of the pending ask_operator call."""
        question = store.get_question(self.session.question_id or "")
        if question is None:
            raise RuntimeError(f"continuation {self.session.session_id} names no stored question")
        if not question.blocking:  # the asker had finished: the answer arrives as news, not as a call's result
            text = (
                f"The operator <@{question.answered_by}> answered your earlier question {question.text!r}: "
                f"{question.answer}"
            )
            return types.Content(role="user", parts=[types.Part(text=text)])
        answer = {"answer": question.answer, "answered_by": question.answered_by}
        if question.options:
            answer["matched_option"] = question.matched_option
            if question.matched_option is None:
                answer["note"] = "The reply matched none of the options; read it as free text."
        response = types.FunctionResponse(id=question.call_id, name="ask_operator", response={"result": answer})
        return types.Content(role="user", parts=[types.Part(function_response=response)])

    def _model_turn(self, *, with_tools: bool) -> types.Content | None:
        """One model turn, persisted. Returns the content if the loop goes on, None once answered."""
        history = shorten_tool_results(contents_of(self.steps), config.settings().model_context_tokens)
        declarations = [t.declaration() for t in self.tools] if with_tools else []
        response = gemini.generate(history, system=prompts.SYSTEM, tools=declarations)
        content = _first_content(response)
        calls = [p.function_call for p in content.parts or [] if p.function_call] if with_tools else []
        text = "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)
        audit = [{"type": "model", "text": tools.short(text), "calls": [c.name for c in calls], "at": store.now()}]
        if calls:
            self._commit("model", content, audit, turns=self.session.turns + 1)
            return content
        content = types.Content(role="model", parts=[types.Part(text=text)])
        step = self._commit("model", content, audit, turns=self.session.turns + 1)
        if self._answer(text, step) == SessionStatus.RUNNING:
            return content  # notes arrived as it finished: go on
        return None

    def _answer(self, text: str, step: Step, *, last: bool = False) -> SessionStatus:
        """Post the answer and end the session; notes that arrived meanwhile keep it going, unless ``last``."""
        audit: list[dict[str, Any]] = []
        if text.strip():
            stamps = self._post(text, key=f"{self.session.session_id}:{step.seq}:answer")
            audit = [{"type": "post", "ts": stamps[0], "parts": len(stamps), "at": store.now()}]
        own = [entry for s in self.steps if s.session_id == self.session.session_id for entry in s.audit]
        closed = gate.closed_loop(own + audit)
        status = SessionStatus.DONE if closed else SessionStatus.SILENT_EXIT
        try:
            self._commit(
                "end",
                None,
                audit,
                wait_for_notes=not last,
                status=status.value,
                closed_loop=closed,
                ended_at=store.now(),
            )
            if last and self.notes:
                log.warning("session ended at its budget with unread notes", extra={"notes": len(self.notes)})
        except store.NotesPending as pending:
            self._commit("end", None, audit)  # any post is recorded; the notes are read next turn
            self.notes = pending.notes
            return SessionStatus.RUNNING
        if closed:
            self._react_end(DONE)
            followup.narrated(self.session)
            log.info("session done", extra={"turns": self.session.turns, "tool_calls": self.session.tool_calls})
            return SessionStatus.DONE
        slack.unreact(self.session.channel, self.session.trigger_ts, WORKING)
        log.warning("session ended without reporting back", extra={"turns": self.session.turns})
        followup.after_silent_exit(self.session, reason="the session ended without reporting back")
        return SessionStatus.SILENT_EXIT

    def _run_tools(self, calls: list[types.FunctionCall]) -> bool:
        """Run the pending calls and persist their responses; True if a blocking ask paused the session."""
        seq = self.steps[-1].seq
        parts: list[types.Part] = []
        audit: list[dict[str, Any]] = []
        pause = None
        pause_call = calls[0]
        used = self.session.tool_calls
        for index, call in enumerate(calls):
            name = call.name or ""
            ctx = tools.ToolContext(self.session, seq, index, call.id, self.posted)
            if used >= self.budget.max_tool_calls:
                response: dict[str, Any] = {"error": "tool budget exhausted; wrap up without more tools"}
            else:
                response = tools.run(name, call.args, ctx, self.allowed)
                used += 1
            spec = tools.REGISTRY.get(name)
            audit.append(
                {
                    "type": "tool",
                    "name": name,
                    "args": tools.short(call.args),
                    "result": tools.short(response),
                    "outward": bool(spec and spec.outward) and "error" not in response,
                    "posts": ctx.post_ts,
                    "at": store.now(),
                }
            )
            if ctx.pause is not None:
                if pause is not None:  # a second blocking ask in one turn cancelled the first
                    cancelled = {"result": {"status": "cancelled", "note": "A newer question replaced this one."}}
                    parts.append(_response(pause_call, cancelled))
                pause, pause_call = ctx.pause, call  # no function response: the operator's answer will be it
                continue
            parts.append(_response(call, response))
        content = types.Content(role="user", parts=parts) if parts else None
        if pause is None:
            self._commit("tool_results", content, audit, tool_calls=used)
            return False
        self._commit(
            "tool_results",
            content,
            audit,
            tool_calls=used,
            status=SessionStatus.PAUSED.value,
            question_id=pause.question_id,
            ended_at=store.now(),
        )
        slack.unreact(self.session.channel, self.session.trigger_ts, WORKING)
        log.info("session paused for the operator", extra={"question_id": pause.question_id})
        return True

    def _final_without_tools(self, instruction: str, *, kind: str, minimal: bool = False) -> SessionStatus:
        """A last turn with no tools (a budget ran out, or the context is too long), and its reply posted."""
        note = types.Content(role="user", parts=[types.Part(text=instruction)])
        self._commit(kind, note, [{"type": kind, "at": store.now()}])
        if minimal:
            first = [s for s in self.steps if s.kind == "prompt"][:1]
            history = [*contents_of(first), note]
        else:
            history = shorten_tool_results(contents_of(self.steps), config.settings().model_context_tokens)
        try:
            response = gemini.generate(history, system=prompts.SYSTEM)
        except (gemini.ModelUnavailable, gemini.ContextTooLong) as exc:
            return self._fail(f"the AI model could not produce a final answer ({exc})")
        content = _first_content(response)
        text = "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)
        step = self._commit(
            "model",
            types.Content(role="model", parts=[types.Part(text=text)]),
            [{"type": "model", "text": tools.short(text), "calls": [], "at": store.now()}],
            turns=self.session.turns + 1,
        )
        return self._answer(text, step, last=True)

    def _fail(self, reason: str) -> SessionStatus:
        fail_session(self.session, reason, self.posted, seq=self.session.next_seq)
        return SessionStatus.FAILED

    @staticmethod
    def give_up(session: Session, reason: str) -> None:
        """End a session that keeps crashing as failed, telling the thread; best effort."""
        try:
            fail_session(session, reason, slack.posted_keys(session.channel, session.thread_ts), seq=session.next_seq)
        except Exception:
            log.exception("could not record the failure of a crashing session")


def fail_session(session: Session, reason: str, posted: dict[str, str], *, seq: int) -> None:
    """Tell the thread in plain words, persist the failure, and end the session as failed."""
    log.error("session failed", extra={"reason": reason})
    key = f"{session.session_id}:failed:0"
    text = f"Sorry, I could not finish this: {reason}. Nothing more will happen on its own; mention me again to retry."
    ts = posted.get(key) or slack.post(session.channel, session.thread_ts, text, key=key)
    step = Step(
        seq=seq,
        session_id=session.session_id,
        kind="failed",
        content=None,
        audit=[{"type": "failure", "error": reason, "at": store.now()}, {"type": "post", "ts": ts}],
        at=store.now(),
    )
    fields = {"status": SessionStatus.FAILED.value, "error": reason, "ended_at": store.now()}
    store.commit_step(session, step, lease_seconds=0, fields=fields)
    slack.unreact(session.channel, session.trigger_ts, WORKING)
    slack.react(session.channel, session.trigger_ts, FAILED)


def _response(call: types.FunctionCall, response: dict[str, Any]) -> types.Part:
    return types.Part(function_response=types.FunctionResponse(id=call.id, name=call.name, response=response))


def _first_content(response: types.GenerateContentResponse) -> types.Content:
    candidate = response.candidates[0] if response.candidates else None
    if candidate is None or candidate.content is None:
        return types.Content(role="model", parts=[])
    return candidate.content

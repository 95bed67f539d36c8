"""A blocking child's end: the ``delegate`` call that started it gets its result, or an error (never an empty
success: a child that ended without a result is "the helper ended without a result")."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import firestore
from google.genai import types

from shared.agent.tools.base import Outcome, short
from shared.agent.tools.result import ToolResult
from shared.agent.waits.base import Resumed
from shared.asks import delegation
from shared.limits import MAX_TOOL_RESULT_CHARS
from shared.state import children as stored_children
from shared.state.batched import Docs
from shared.state.firestore import now, session_ref
from shared.state.models import Audit, AuditType, Note, SessionStatus, Waiting, WaitKind
from shared.state.session_model import Session

NO_RESULT = stored_children.NO_RESULT


def child_response(child: Session) -> ToolResult:
    """What a delegate call returns once its child has ended: its result, or an error (never an empty success)."""
    if child.status == SessionStatus.DONE and not child.error and not (child.result or "").strip():
        return ToolResult.fail(NO_RESULT)
    if child.status == SessionStatus.DONE and not child.error:
        return ToolResult.ok(child.result or "")
    if child.status == SessionStatus.DONE:
        return ToolResult.fail(f"the child {child.error}; what it said last: {child.result or '(nothing)'}")
    return ToolResult.fail(f"the child did not finish ({child.status.value}): "
                           f"{child.result or child.error or 'no reason'}")  # fmt: skip


@dataclass(frozen=True)
class ChildResume:
    kind: WaitKind = WaitKind.CHILD
    shown_in_tree: bool = True

    def pausing(self, entries: list[Waiting]) -> None:
        """The turn's blocking children start, each knowing the others."""
        if entries:
            delegation.launch([w.key for w in entries])

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        return [session_ref(w.key) for w in entries]

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> dict[str, Session]:
        found = {w.key: docs.get(session_ref(w.key).path) for w in entries}
        return {key: Session.from_doc(data) for key, data in found.items() if data is not None}

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall,
                found: dict[str, Session]) -> Outcome:  # fmt: skip
        child = found.get(entry.key)
        ended = (child_response(child) if child else ToolResult.fail("the helper session is lost")).capped(
            MAX_TOOL_RESULT_CHARS)  # fmt: skip
        resumed.audit.append(Audit(AuditType.TOOL, now(), name=call.name, args=short(call.args),
                                   result=short(ended.to_dict())))  # fmt: skip
        return ended

    def news(self, entries: list[Waiting]) -> list[Note]:
        # A released child (one of them asked its parent) may still run: its result comes as a note of its own, from
        # its end (or, ended before the release, from the release itself), never from here.
        ended = [w.key for w in entries if not w.released]
        if not ended:
            return []  # no read with nothing to read
        return [stored_children.result_note(c) for c in stored_children.get_children(ended)]


WAIT = ChildResume()

"""The lines of a delegation tree's status message, kept beside its root (issue 28.4): one document
(``sessions/{root}/views/tree``) holding, per delegated task, the line the thread shows for it, and what the
children that ended gave back to the tree's budget.

A child that starts or ends refreshes the message. Reading the whole tree for that made each child's end cost a read
per member (N children ending: N² reads). Instead the child writes its own line into this document (one merged
write that reads nothing) and reads the document back: the last of several to write reads every line. A child's
end writes its line in its ending transaction (``ended``), with what it gives back to the tree (the turns and tool
calls of its allotment it did not use, the tokens it used): the only document shared by the tree that a child's
end writes. Its root session is written only when a child is created (its allotment, ``tree_reserved``): the
tree's budget left is the root's allotments less what this document says was given back (``allotted``), so
children ending together never queue their commits on the root document that their parent's step commits write,
and queue them on one document, not two. The full picture is read from the sessions themselves (one query) only
where the tree grows or a parent resumes on its children (``merge``); that merge keeps, per task, the newer of its
stored line and the one read (by the session's update time), so a refresh that read a task before it ended never
hides its end. Every stored line carries its write's commit time (``written``): a child that finds a sibling's line
stored after its own leaves the status message's update to that sibling (``View.stored_after``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.firestore import SESSIONS, db, session_ref, transact
from shared.state.models import SessionStatus, WaitKind
from shared.state.session_model import Session

VIEWS = "views"  # subcollection of a tree's root session
TREE = "tree"  # its document holding the tree's status lines
RETURNED = "returned"  # on it: the turns and tool calls ended children gave back to the tree's budget
TOKENS = "tokens"  # on it: the tokens ended children used

_ENDED = {
    SessionStatus.DONE: ":white_check_mark: done",
    SessionStatus.FAILED: ":x: failed",
    SessionStatus.STOPPED: ":octagonal_sign: stopped",
    SessionStatus.ABANDONED: ":hourglass: abandoned: its question went unanswered",  # the sweep ended an asking child
}


@dataclass(frozen=True)
class Line:
    """One delegated task as the status message shows it."""

    child_id: str
    parent_id: str | None
    depth: int
    seq: int  # the delegating step and call index: siblings in call order
    index: int
    text: str
    state: str
    ended: bool
    at: datetime | None  # the session document's update time this line was made from
    # When the view stored it (its commit's time; None for a line made in memory, or stored before lines carried
    # it): not part of what the line shows.
    written: datetime | None = field(default=None, compare=False)

    def to_doc(self) -> dict[str, Any]:
        """The line as stored: every write of a line stamps it with its commit's time (``written``)."""
        return {"parent": self.parent_id, "depth": self.depth, "seq": self.seq, "index": self.index,
                "text": self.text, "state": self.state, "ended": self.ended, "at": self.at,
                "written": firestore.SERVER_TIMESTAMP}  # fmt: skip

    @classmethod
    def from_doc(cls, child_id: str, doc: dict[str, Any]) -> Line:
        return cls(child_id, doc.get("parent"), int(doc.get("depth") or 1), int(doc.get("seq") or 0),
                   int(doc.get("index") or 0), str(doc.get("text") or ""), str(doc.get("state") or ""),
                   bool(doc.get("ended")), doc.get("at"), _time(doc.get("written")))  # fmt: skip


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


@dataclass(frozen=True)
class View:
    lines: list[Line]
    status_ts: str | None  # the thread message showing the tree, once posted
    complete: bool  # written by a full read of the tree (else only children's own lines: read the tree)

    def stored_after(self, child_id: str) -> bool:
        """Whether another task's line was stored after ``child_id``'s own (by the commits' times). Its writer reads
        the view after that write, so it reads this line too, and shows the tree (or leaves it to a writer after it,
        down to the last, which nothing follows): this one's update of the status message would be overtaken."""
        own = next((line.written for line in self.lines if line.child_id == child_id), None)
        return own is not None and any(
            line.written is not None and line.written > own for line in self.lines if line.child_id != child_id
        )


def state_of(child: Session) -> str:
    """A child's state as the thread shows it."""
    if child.status == SessionStatus.DONE and child.error:
        return ":warning: ended early: " + child.error
    if child.status in _ENDED:
        return _ENDED[child.status]
    if child.status == SessionStatus.PAUSED:
        kinds = {w.kind for w in child.waiting if not w.released}
        if WaitKind.APPROVAL in kinds:
            return ":lock: waiting for an approval"
        if WaitKind.CHILD in kinds:
            return ":hourglass: waiting for its own delegated tasks"
        if WaitKind.PARENT_ANSWER in kinds:
            return ":raising_hand: waiting for the parent's answer"
        return ":double_vertical_bar: paused"
    return ":gear: working"  # queued or running: its task is on its way


def line_of(member: Session, at: datetime | None) -> Line:
    """A task's line, from its session as stored (``at``: its document's update time)."""
    tree = member.tree
    return Line(member.session_id, tree.parent_id, tree.depth or 1, tree.delegate_seq or 0, tree.delegate_index or 0,
                member.text, state_of(member), member.status in _ENDED, at)  # fmt: skip


def view_ref(root_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = session_ref(root_id).collection(VIEWS).document(TREE)
    return ref


def _view(doc: dict[str, Any] | None) -> View:
    doc = doc or {}
    lines = [Line.from_doc(str(k), v) for k, v in (doc.get("lines") or {}).items() if isinstance(v, dict)]
    return View(lines, doc.get("status_ts"), bool(doc.get("complete")))


def own(session_id: str) -> tuple[Session, datetime | None] | None:
    """A session as stored now, with its document's update time (one read)."""
    snap = session_ref(session_id).get()
    data = snap.to_dict() if snap.exists else None
    return (Session.from_doc(data), snap.update_time) if data is not None else None


def tree_members_at(root_id: str) -> list[tuple[Session, datetime | None]]:
    """Every session delegated within the tree, with its update time (the indexed ``root_session_id`` query)."""
    query = db().collection(SESSIONS).where(filter=FieldFilter("root_session_id", "==", root_id))
    return [(Session.from_doc(snap.to_dict() or {}), snap.update_time) for snap in query.stream()]


def put(root_id: str, line: Line) -> View:
    """Store one task's line (a write that transacts with nothing) and read the view back (one read)."""
    ref = view_ref(root_id)
    ref.set({"lines": {line.child_id: line.to_doc()}}, merge=True)
    return _view(ref.get().to_dict())


def ended(transaction: firestore.Transaction, child: Session, *, status: SessionStatus, error: str | None,
          returned: dict[str, int], tokens: dict[str, int]) -> None:  # fmt: skip
    """A child's end, in the transaction that stores it: its line as it ends (made at the commit's time, which is
    its session document's update time), what it gives back to its tree and the tokens it used, in one merged write
    that reads nothing."""
    line = line_of(replace(child, status=status, error=error), None).to_doc()
    line["at"] = firestore.SERVER_TIMESTAMP
    fields: dict[str, Any] = {"lines": {child.session_id: line}}
    if gave := {kind: firestore.Increment(count) for kind, count in returned.items() if count}:
        fields[RETURNED] = gave
    if used := {kind: firestore.Increment(count) for kind, count in tokens.items() if count}:
        fields[TOKENS] = used
    transaction.set(view_ref(child.tree_root), fields, merge=True)


def read(root_id: str) -> View:
    """The tree's view as stored (one read)."""
    return _view(view_ref(root_id).get().to_dict())


def root_status_ts(root_id: str) -> str | None:
    """The thread message showing the tree as its root session names it (trees posted before views were kept have
    it only there), if it does (one read of that field)."""
    found = session_ref(root_id).get(field_paths=["tree_status_ts"]).to_dict() or {}
    return found.get("tree_status_ts") or None


def allotted(root_id: str, transaction: firestore.Transaction | None = None) -> dict[str, int]:
    """The turns and tool calls of the tree's budget allotted to children and not given back (one batched read of
    the root and the view, in ``transaction`` if given)."""
    root_ref, ref = session_ref(root_id), view_ref(root_id)
    read = db().get_all([root_ref, ref], field_paths=["tree_reserved", RETURNED], transaction=transaction)
    found = {snap.reference.path: snap.to_dict() for snap in read}
    return reserved(found.get(root_ref.path) or {}, found.get(ref.path))


def reserved(root: dict[str, Any], view: dict[str, Any] | None) -> dict[str, int]:
    """The turns and tool calls of the tree's budget allotted to children and not given back: the root's
    allotments (``tree_reserved``) less what the view says ended children gave back."""
    allotted = root.get("tree_reserved") or {}
    returned = (view or {}).get(RETURNED) or {}
    return {kind: int(allotted.get(kind, 0)) - int(returned.get(kind, 0)) for kind in ("turns", "tool_calls")}


def tokens(root_id: str) -> dict[str, int]:
    """The tokens every ended child of the tree used (its root's ``tree_tokens`` for children that ended before
    the view kept them)."""
    root = session_ref(root_id).get().to_dict() or {}
    view = view_ref(root_id).get().to_dict() or {}
    kinds = {**(root.get("tree_tokens") or {}), **(view.get(TOKENS) or {})}
    return {k: int((root.get("tree_tokens") or {}).get(k, 0)) + int((view.get(TOKENS) or {}).get(k, 0)) for k in kinds}


def _newer(line: Line, stored: Line | None) -> bool:
    """Whether ``line`` was made from a later version of its session than the stored one and shows something else
    (a later version that shows the same leaves the stored line: no version of the session lies between the two)."""
    if stored is None or stored.at is None:
        return True
    return line.at is not None and line.at > stored.at and replace(line, at=None) != replace(stored, at=None)


def merge(root_id: str, lines: list[Line], *, first: bool = False) -> View:
    """Store the lines a full read of the tree made (each only over an older one) and return the merged view.
    ``first``: the tree's view most likely does not exist yet (its root delegates before posting the message):
    created without reading it (and merged as below if it does exist)."""
    ref = view_ref(root_id)
    if first:
        try:
            ref.create({"complete": True, "lines": {line.child_id: line.to_doc() for line in lines}})
        except gexc.AlreadyExists:
            pass
        else:
            return View(list(lines), None, True)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> View:
        found = _view(ref.get(transaction=transaction).to_dict())
        stored = {line.child_id: line for line in found.lines}
        fresh = [line for line in lines if _newer(line, stored.get(line.child_id))]
        stored |= {line.child_id: line for line in fresh}
        if fresh or not found.complete:
            fields: dict[str, Any] = {"complete": True}
            if fresh:  # (an empty map would replace the stored one)
                fields["lines"] = {line.child_id: line.to_doc() for line in fresh}
            transaction.set(ref, fields, merge=True)
        return View(list(stored.values()), found.status_ts, True)

    view: View = transact(run)  # (``Contended`` if its commit kept aborting)
    return view


def set_status_ts(root_id: str, ts: str) -> None:
    """Remember the thread message that shows the tree (trees posted before views were kept have it on their root
    session, ``tree_status_ts``)."""
    view_ref(root_id).set({"status_ts": ts}, merge=True)

"""A person's message while a thread's session works: queued as a note that session reads at its next step."""

from __future__ import annotations

from enum import StrEnum

from google.cloud import firestore

from shared.limits import MAX_PENDING_NOTES_CHARS
from shared.state import events, ids
from shared.state.firestore import ALREADY_EXISTS, event_ref, now, session_ref, transact
from shared.state.models import Note, SessionKind, SessionStatus
from shared.state.sessions import takes_notes_queued
from shared.state.updates import appended


class NoteAdded(StrEnum):
    ADDED = "added"
    NOT_RUNNING = "not_running"  # the session ended meanwhile: the message is handled like any other
    DUPLICATE = "duplicate"  # this message was acted on already (a Slack retry, its app_mention twin)
    FULL = "full"  # the session has ``MAX_PENDING_NOTES_CHARS`` unread already: the message was not passed on


def add_note(session_id: str, note: Note, *, channel: str, paused: bool = False) -> NoteAdded:
    """Queue a thread message as a note for a running session (or a queued continuation that takes notes: it reads
    them at its first turn), claiming the message in the same transaction: a crash can neither lose the note after
    the claim nor queue it twice, and the session's claim, a transaction over the same document, reads it or runs
    before it (then the note finds it running and its next step commit reads it).

    ``paused``: a top-level session paused on what its turn waits for takes the note too. Whatever resumes that turn
    moves its notes to the continuation in a write fenced by (or a transaction over) this document, so the resumed
    turn reads the note, once."""
    ref = session_ref(session_id)
    claim = event_ref(ids.message_key(channel, note.ts))

    @firestore.transactional
    def add(transaction: firestore.Transaction) -> NoteAdded:
        fields = ["status", "kind", "late_note", "notes"]
        current = ref.get(transaction=transaction, field_paths=fields).to_dict() or {}
        status = current.get("status")
        queued = status == SessionStatus.QUEUED.value and takes_notes_queued(current.get("kind"),
                                                                            current.get("late_note"))  # fmt: skip
        waits = paused and status == SessionStatus.PAUSED.value and current.get("kind") != SessionKind.CHILD.value
        if status != SessionStatus.RUNNING.value and not queued and not waits:
            return NoteAdded.NOT_RUNNING
        unread = sum(len(str(n.get("text") or "")) for n in current.get("notes") or [] if isinstance(n, dict))
        if unread + len(note.text) > MAX_PENDING_NOTES_CHARS:  # claimed (its twin is no new message), not kept
            transaction.create(claim, events.record("note-refused", session_id, now()))
            return NoteAdded.FULL
        transaction.create(claim, events.record("note", session_id, now()))
        transaction.update(ref, appended(notes=[note]))
        return NoteAdded.ADDED

    try:
        added: NoteAdded = transact(add)
    except ALREADY_EXISTS:
        return NoteAdded.DUPLICATE
    return added

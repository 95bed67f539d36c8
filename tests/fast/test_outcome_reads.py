"""What a resumption reads (issue 28.1), without Firestore: nothing when there is nothing to read, every kind's
documents in one list for one batched read, and Firestore times compared to the nanosecond."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from shared.agent.waits import kinds, outcomes
from shared.state import batched, claim_reads
from shared.state.models import SessionKind, SessionStatus, Waiting, WaitKind
from shared.state.session_model import Session


class NoStore:
    """A Firestore client that must not be asked anything."""

    def get_all(self, refs: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a batched read of {list(refs)}")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    client = firestore.Client(project="offline", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]  # builds references only
    monkeypatch.setattr("shared.deps.firestore", lambda: client)


@pytest.fixture
def no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batched, "db", NoStore)


def test_nothing_to_read_is_not_read(no_store: None) -> None:
    assert batched.read([]) == {}


def test_documents_known_are_not_read_again(no_store: None) -> None:
    from shared.state.firestore import question_ref

    ref = question_ref("q-ev-1-1-0")
    assert batched.read([ref], known={ref.path: {"status": "answered"}}) == {ref.path: {"status": "answered"}}


def _session() -> Session:
    return Session.new(session_id="resume-ev-1-1", kind=SessionKind.CONTINUATION, channel="C1", thread_ts="1.0",
                       trigger_ts="1.0", trigger_user="U1", text="", created_at=datetime(2026, 11, 26, tzinfo=UTC),
                       status=SessionStatus.RUNNING, transcript_id="ev-1")  # fmt: skip


def test_every_kinds_documents_are_named_for_one_read() -> None:
    record = [Waiting(1, 0, WaitKind.QUESTION, "q-ev-1-1-0"), Waiting(1, 1, WaitKind.APPROVAL, "a-ev-1-1-1"),
              Waiting(1, 2, WaitKind.CHILD, "child-ev-1-1-2"),
              Waiting(1, 3, WaitKind.CHILD, "child-ev-1-1-3", True)]  # fmt: skip
    paths = [ref.path for ref in outcomes.refs(_session(), record)]
    assert paths == [
        "questions/q-ev-1-1-0",
        "approvals/a-ev-1-1-1",
        "sessions/ev-1/calls/000001-01",
        "sessions/child-ev-1-1-2",
    ]  # fmt: skip  (the released child is not read: it reports as a note)


def test_a_record_with_nothing_stored_apart_reads_nothing(no_store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    record = [Waiting(1, 0, WaitKind.PARENT_ANSWER, "p-1")]
    assert outcomes.refs(_session(), record) == []
    assert outcomes.read(_session(), record)[WaitKind.PARENT_ANSWER] is None  # the answer is on the session
    monkeypatch.setattr("shared.state.children.db", NoStore)
    assert all(wait.news([]) == [] for wait in kinds.KINDS.values())  # no children: none read (was a "get 0r")


def test_each_kind_takes_its_own_from_the_one_read() -> None:
    record = [Waiting(1, 0, WaitKind.QUESTION, "q-ev-1-1-0"), Waiting(1, 1, WaitKind.APPROVAL, "a-ev-1-1-1")]
    docs: dict[str, dict[str, Any] | None] = {"questions/q-ev-1-1-0": None, "approvals/a-ev-1-1-1": None,
                                              "sessions/ev-1/calls/000001-01": None}  # fmt: skip
    found = outcomes.found(_session(), record, docs)
    assert found[WaitKind.QUESTION] == {}  # not stored: its call is told the question was lost
    assert found[WaitKind.APPROVAL].approvals == {}
    assert found[WaitKind.APPROVAL].recorded == {}


def test_firestore_times_compare_to_the_nanosecond() -> None:
    earlier = DatetimeWithNanoseconds(2026, 11, 26, 7, 0, 0, nanosecond=123_456_100, tzinfo=UTC)  # type: ignore[no-untyped-call]
    later = DatetimeWithNanoseconds(2026, 11, 26, 7, 0, 0, nanosecond=123_456_900, tzinfo=UTC)  # type: ignore[no-untyped-call]
    assert not earlier < later  # datetime sees one microsecond
    assert not later < earlier
    assert claim_reads.stamp(earlier) < claim_reads.stamp(later)
    plain = datetime(2026, 11, 26, 7, 0, 0, 123_456, tzinfo=UTC)
    assert claim_reads.stamp(plain) == (int(plain.timestamp()), 123_456_000)

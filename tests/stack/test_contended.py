"""A Firestore transaction that gives up for contention is a retryable "try again", not a crash.

Parallel deliveries on a busy emulator once made a continuation's claim fail to commit in its 8 attempts: the client
raised ``ValueError: Failed to commit transaction in 8 attempts``, the handler answered 500 with a traceback logged
as an ERROR. Now it answers 500 (a 503 would slow Cloud Tasks' whole queue) with one WARNING line under the
session's id and no traceback, has written nothing, and the redelivery Cloud Tasks makes runs the session once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

from infra.stack import Stack
from shared.errors import Contended
from shared.handlers import agent_session
from shared.logs import JsonFormatter
from shared.state import firestore, steps
from shared.state.models import SessionStatus, StepKind
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


class Lines(logging.Handler):
    """The product's JSON log lines at WARNING and above, formatted as they are written (under their context)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_claim_whose_transaction_gives_up_for_contention_asks_for_a_retry_that_runs_it_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, lines: Lines
) -> None:
    real_commit = FirestoreClient.commit
    aborted: list[bytes] = []

    def contended_commit(self: FirestoreClient, request: Any = None, **kwargs: Any) -> Any:
        """While armed, a transaction's commit is refused as the emulator refuses one that lost a lock to another
        transaction: the client's own retry runs the transaction again, from its reads, until it gives up."""
        sent = request if isinstance(request, dict) else {}
        transaction = sent.get("transaction")
        if transaction:
            aborted.append(transaction)  # an aborted commit ends its transaction, releasing its locks
            self.rollback(request={"database": sent["database"], "transaction": transaction})
            raise gexc.Aborted("Transaction lock timeout (contended)")  # type: ignore[no-untyped-call]
        return real_commit(self, request, **kwargs)

    with counted_rig(stack, monkeypatch) as rig:
        session_id = rig.start("say it once")
        rig.script(rig.gemini.text("Once."))
        before, stored = rig.session(session_id), steps.load_steps(session_id)
        body = json.dumps({"session_id": session_id}).encode()
        with monkeypatch.context() as armed:
            armed.setattr(FirestoreClient, "commit", contended_commit)
            reply, status = agent_session.handle(
                body, {"x-cloudtasks-taskname": "t", "x-cloudtasks-taskretrycount": "0"}
            )
        assert status == 500, reply
        assert len(aborted) >= 8  # the client's whole retry ran, against the emulator's reads
        contended = [line for line in lines.lines if line.get("session_id") == session_id]
        assert [line["severity"] for line in contended] == ["WARNING"], lines.lines
        assert not any("exception" in line for line in lines.lines), lines.lines  # no traceback
        after = rig.session(session_id)  # nothing of the refused claim was written
        assert (after.status, after.lease.worker, after.updated_at) == (before.status, before.lease.worker,
                                                                         before.updated_at)  # fmt: skip
        assert steps.load_steps(session_id) == stored
        reply, status = agent_session.handle(body, {"x-cloudtasks-taskname": "t", "x-cloudtasks-taskretrycount": "1"})
        assert status == 200, reply
        rig.expect(session_id, SessionStatus.DONE)
        kinds = [step.kind for step in steps.load_steps(session_id)]
        assert kinds.count(StepKind.MODEL) == 1, kinds  # the model's answer, stored once
        rig.script_used()


@pytest.mark.parametrize(("attempt", "ends"), [(0, None), (2, SessionStatus.FAILED)])
def test_a_session_whose_commits_keep_giving_up_for_contention_is_given_up_on_its_last_attempt(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, attempt: int, ends: SessionStatus | None
) -> None:
    """A commit of a running session that gives up for contention asks for a retry (its lease released), except on
    the attempt a crash is given up on: it is failed and told then too (the reviewer: Cloud Tasks stopped retrying
    after its attempts and left the session running, untold, until the sweep's net)."""
    from shared.agent.runner import Runner

    def contended(self: Runner) -> SessionStatus:
        raise Contended("a Firestore transaction gave up for contention: test")

    with counted_rig(stack, monkeypatch) as rig:
        session_id = rig.start("keep trying")
        monkeypatch.setattr(Runner, "run", contended)
        body = json.dumps({"session_id": session_id}).encode()
        headers = {"x-cloudtasks-taskname": "t", "x-cloudtasks-taskretrycount": str(attempt)}
        reply, status = agent_session.handle(body, headers)
        if ends is None:
            assert status == 500, reply
            lease = rig.session(session_id).lease
            assert lease.until is not None
            assert lease.until <= firestore.now()  # released: the retry takes it over at once
        else:
            assert status == 200, reply
            rig.expect(session_id, ends)

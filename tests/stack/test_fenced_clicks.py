"""A click's fenced commit (issue 28.1) against real races on the emulator: an answer or a decision reads its
question (or approval), asker and continuation outside a transaction and commits once, fenced by the update times it
read (``shared.state.fenced``). A racing click, or a stop, that commits between that read and that commit makes the
fence fail; the transaction then decides as it always did: one winner, one continuation, the loser told.

The click under test runs in a thread of its own, held between its read and its commit (``Held``) until the racer
has committed, so the race is lost every time, not by luck; one race is run unheld too."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from bench import cost
from bench.rig import environment
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.asks import approvals as approvals_flow
from shared.asks import edits, stopping
from shared.slack import blocks, edit_modal
from shared.state import approvals, fenced, firestore, ids, questions, sessions
from shared.state.models import Approval, ApprovalStatus, Question, QuestionStatus, SessionStatus, WaitKind
from tests.poll import wait_for

pytestmark = pytest.mark.stack
SECOND = "U0OPERATOR2"  # a second operator, for this module's product code


class Held:
    """Holds the fenced commit of the thread named ``held`` after its read until ``release``; ``settled``: what its
    commit did (False: a fence failed and nothing was written)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waiting = threading.Event()
        self.go = threading.Event()
        self.settled: list[bool] = []
        settle = fenced.FencedBatch.settle

        def held(batch: fenced.FencedBatch, depends: Any) -> bool:
            if threading.current_thread().name != "held":
                return settle(batch, depends)
            self.waiting.set()
            assert self.go.wait(timeout=120), "never released"
            self.settled.append(settle(batch, depends))
            return self.settled[-1]

        monkeypatch.setattr(fenced.FencedBatch, "settle", held)

    def race(self, click: Callable[[], object], racer: Callable[[], object]) -> None:
        """``click`` read, then ``racer`` ran to its end, then ``click`` commits (or falls back) and ends."""
        errors: list[BaseException] = []

        def run() -> None:
            try:
                click()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, name="held", daemon=True)
        thread.start()
        wait_for(lambda: self.waiting.is_set() or not thread.is_alive(), timeout=60, what="the click's read")
        racer()
        self.go.set()
        thread.join(timeout=120)
        assert not thread.is_alive(), "the held click never ended"
        if errors:
            raise errors[0]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Held:
    return Held(monkeypatch)


@pytest.fixture
def two_operators(rig: cost.Rig) -> Iterator[cost.Rig]:
    with environment(OPERATOR_USER_IDS=f"{local.OPERATOR_ID},{SECOND}"):
        yield rig


def _asked(rig: cost.Rig) -> tuple[str, Question]:
    session_id = rig.paused("set up the database", FakeGemini.call("ask_operator", question="sqlite or postgres?",
                                                                    options=["sqlite", "postgres"]))  # fmt: skip
    question = questions.get_question(rig.session(session_id).awaited_question or "")
    assert question is not None
    assert question.post_ts
    return session_id, question


def _press(question: Question, option: int, user: str) -> tuple[bytes, dict[str, str]]:
    return cost.Rig.press(question.channel, question.post_ts or "", question.thread_ts, action_id=f"answer_{option}",
                          value=blocks.question_value(question.question_id, option), user=user)  # fmt: skip


def _click(request: tuple[bytes, dict[str, str]], into: dict[str, Any]) -> Callable[[], None]:
    return lambda: cost.Rig.interactivity(request, into)


def _continuations(asker_id: str) -> list[str]:
    """The sessions that continue ``asker_id`` (each created once, by whatever resumed it)."""
    query = firestore.db().collection(firestore.SESSIONS).where(filter=FieldFilter("asker_session_id", "==", asker_id))
    return [snap.id for snap in query.stream() if (snap.to_dict() or {}).get("kind") == "continuation"]


def test_a_click_that_reads_before_a_racing_answer_commits_loses_to_it(
    fake_slack: FakeSlack, two_operators: cost.Rig, held: Held
) -> None:
    rig = two_operators
    session_id, question = _asked(rig)
    rig.script(FakeGemini.text("Going with postgres."))
    first, second = dict[str, Any](), dict[str, Any]()
    held.race(_click(_press(question, 1, local.OPERATOR_ID), first),
              _click(_press(question, 2, SECOND), second))  # fmt: skip
    assert held.settled == [False]  # the held click's fence failed: the racer wrote the question and the asker
    assert (second["answer"], first["answer"]) == ("answered", "not_open")
    answered = questions.get_question(question.question_id)
    assert answered is not None
    assert (answered.answered_by, answered.answer) == (SECOND, "postgres")
    assert _continuations(session_id) == [ids.resumed_by(question.question_id)]
    assert rig.session(session_id).status == SessionStatus.RESUMED
    [note] = fake_slack.ephemerals(question.post_place()[0], user=local.OPERATOR_ID)
    assert "already answered" in note["text"]
    rig.deliver(ids.resumed_by(question.question_id))  # the winner's continuation runs, once
    rig.expect(ids.resumed_by(question.question_id), SessionStatus.DONE)


def test_a_click_that_reads_before_a_stop_commits_answers_nothing(fake_slack: FakeSlack, rig: cost.Rig,
                                                                  held: Held) -> None:  # fmt: skip
    """The stop ends the paused asker and cancels its question between the click's read and its commit. Without the
    fences the click's commit would land (its continuation is a new document): a stopped session resumed. The fence
    fails, and the transaction finds the question cancelled."""
    session_id, question = _asked(rig)
    clicked = dict[str, Any]()
    held.race(_click(_press(question, 2, local.OPERATOR_ID), clicked),
              lambda: stopping.stop(session_id, by=local.OPERATOR_ID))  # fmt: skip
    assert held.settled == [False]
    assert clicked["answer"] == "not_open"
    assert rig.session(session_id).status == SessionStatus.STOPPED
    found = questions.get_question(question.question_id)
    assert found is not None
    assert found.status == QuestionStatus.CANCELLED
    assert found.answered_by is None
    assert _continuations(session_id) == []
    assert sessions.get_session(ids.resumed_by(question.question_id)) is None
    [note] = fake_slack.ephemerals(question.post_place()[0], user=local.OPERATOR_ID)
    assert "cancelled" in note["text"]


def test_racing_clicks_unheld_make_one_answer(fake_slack: FakeSlack, two_operators: cost.Rig) -> None:
    """Three presses at once, none held: whichever way the reads and commits interleave, one answer wins."""
    rig = two_operators
    session_id, question = _asked(rig)
    rig.script(FakeGemini.text("Going with it."))
    start = threading.Barrier(3)
    replies = [dict[str, Any]() for _ in range(3)]
    presses = [_press(question, 1, local.OPERATOR_ID), _press(question, 2, SECOND), _press(question, 2, SECOND)]

    def click(index: int) -> None:
        start.wait(timeout=60)
        cost.Rig.interactivity(presses[index], replies[index])

    racers = [threading.Thread(target=click, args=(index,), daemon=True) for index in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=120)
    assert sorted(reply["answer"] for reply in replies) == ["answered", "not_open", "not_open"], replies
    assert _continuations(session_id) == [ids.resumed_by(question.question_id)]
    assert len(fake_slack.ephemerals(question.post_place()[0])) == 2
    rig.deliver(ids.resumed_by(question.question_id))
    rig.expect(ids.resumed_by(question.question_id), SessionStatus.DONE)


def test_a_press_is_one_read_and_one_commit_of_four_writes_and_again_it_writes_nothing(
    fake_slack: FakeSlack, rig: cost.Rig
) -> None:
    """A press names its one question and its commit closes it: the commit writes the question, its thread, the
    continuation and the asker, and claims no message (a reply's claim; a press has no message, and its key would
    never be met again). The same press delivered again finds its question answered: nothing written, the operator
    told, still one continuation."""
    session_id, question = _asked(rig)
    rig.script(FakeGemini.text("Going with postgres."))
    request = _press(question, 2, local.OPERATOR_ID)
    first, again = dict[str, Any](), dict[str, Any]()
    ops = rig.measure(_click(request, first))
    assert first["answer"] == "answered"
    assert [rpc.split(" ")[0] for rpc in ops.trace] == ["BatchGetDocuments", "Commit"], ops.trace
    assert ops.writes == 4, ops.trace
    assert rig.measure(_click(request, again)).writes == 0
    assert again["answer"] == "not_open"
    [note] = fake_slack.ephemerals(question.post_place()[0], user=local.OPERATOR_ID)
    assert "already answered" in note["text"]
    answered = questions.get_question(question.question_id)
    assert answered is not None
    assert (answered.answered_by, answered.answer, answered.answer_pressed) == (local.OPERATOR_ID, "postgres", True)
    assert _continuations(session_id) == [ids.resumed_by(question.question_id)]
    rig.deliver(ids.resumed_by(question.question_id))
    rig.expect(ids.resumed_by(question.question_id), SessionStatus.DONE)


def _approval_asked(rig: cost.Rig) -> tuple[str, Approval]:
    session_id = rig.paused("scale the api", FakeGemini.call("scale_service", name="api", replicas=3))
    [approval] = approvals.get_approvals(rig.session(session_id).awaited(WaitKind.APPROVAL))
    assert approval.card_ts
    return session_id, approval


def _decision(approval: Approval, action: str, user: str) -> tuple[bytes, dict[str, str]]:
    channel, thread_ts = approval.card_place()
    return cost.Rig.press(channel, approval.card_ts or "", thread_ts or approval.thread_ts, action_id=action,
                          value=blocks.approval_value(approval.approval_id, approval.digest), user=user)  # fmt: skip


def test_an_approve_that_reads_before_a_racing_deny_commits_is_told_it_was_denied(
    fake_slack: FakeSlack, two_operators: cost.Rig, held: Held
) -> None:
    rig = two_operators
    session_id, approval = _approval_asked(rig)
    approve, deny = dict[str, Any](), dict[str, Any]()
    held.race(_click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), approve),
              _click(_decision(approval, blocks.DENY_ACTION, SECOND), deny))  # fmt: skip
    assert held.settled == [False]  # the deny wrote the approval and the asker, and created the continuation
    assert (deny["decision"], approve["decision"]) == ("decided", "already_decided")
    decided = approvals.get_approval(approval.approval_id)
    assert decided is not None
    assert (decided.status, decided.decided_by) == (ApprovalStatus.DENIED, SECOND)
    assert _continuations(session_id) == [ids.resume_id(session_id, approval.seq)]
    [note] = fake_slack.ephemerals(approval.card_place()[0], user=local.OPERATOR_ID)
    assert "already denied" in note["text"]


def test_an_approve_that_reads_before_a_stop_commits_runs_nothing(fake_slack: FakeSlack, rig: cost.Rig,
                                                                  held: Held) -> None:  # fmt: skip
    """The stop ends the paused asker and denies its pending approval between the Approve's read and its commit.
    Without the fences the Approve's commit would land (its continuation and its press's event are new documents): a
    denied call approved and a stopped session resumed to run it. The fence fails; the transaction finds it denied."""
    session_id, approval = _approval_asked(rig)
    approve = dict[str, Any]()
    held.race(_click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), approve),
              lambda: stopping.stop(session_id, by=local.OPERATOR_ID))  # fmt: skip
    assert held.settled == [False]
    assert approve["decision"] == "already_decided"
    assert rig.session(session_id).status == SessionStatus.STOPPED
    decided = approvals.get_approval(approval.approval_id)
    assert decided is not None
    assert decided.status == ApprovalStatus.DENIED
    assert decided.approved_by == []
    assert _continuations(session_id) == []
    [note] = fake_slack.ephemerals(approval.card_place()[0], user=local.OPERATOR_ID)
    assert "already denied" in note["text"]


def test_the_fence_fails_on_the_emulator_as_the_product_expects(rig: cost.Rig) -> None:
    """What ``FencedBatch`` relies on, on the emulator: an update under a stale update time and a create of an
    existing document fail the whole commit with one of ``fenced.FENCE_FAILED``, writing nothing."""
    ref = firestore.db().collection("fence_check").document(rig.uid)
    ref.set({"n": 1})
    stale = ref.get()
    ref.update({"n": 2})
    batch = fenced.FencedBatch({ref.path: stale})
    other = firestore.db().collection("fence_check").document(f"{rig.uid}-new")
    batch.create(other, {"n": 0})
    batch.update(ref, {"n": 3})
    assert batch.settle([ref]) is False
    assert ref.get().to_dict() == {"n": 2}
    assert not other.get().exists
    batch = fenced.FencedBatch({})
    batch.create(ref, {"n": 4})
    with pytest.raises(gexc.GoogleAPICallError) as raised:
        batch.commit()
    assert isinstance(raised.value, fenced.FENCE_FAILED)
    fresh = ref.get()
    batch = fenced.FencedBatch({ref.path: fresh})
    batch.update(ref, {"n": 5})
    assert batch.settle([ref]) is True
    assert ref.get().to_dict() == {"n": 5}
    unfenced = fenced.FencedBatch({ref.path: fresh})
    unfenced.create(other, {"n": 0})
    with pytest.raises(fenced.Unfenceable):  # it read ``ref`` and does not write it: nothing holds its state
        unfenced.settle([ref])


# A decision claims no record either (round 3's session 11): it names its one approval, and its commit, fenced on that
# approval, changes it, so the same decision again finds it decided (or, for a rule of two approvers, finds its
# approver counted). What follows holds that argument to real races: two presses at once, two approvers of a
# two-approver rule, an Edit's submission racing an Approve and itself.
TWO = {"scale_service": {"tier": "approve", "approvers": [local.OPERATOR_ID, SECOND], "approvals": 2}}


@pytest.fixture
def two_approvers(two_operators: cost.Rig) -> Iterator[cost.Rig]:
    with environment(TOOL_TIERS=json.dumps(TWO)):
        yield two_operators


def _submission(approval: Approval, user: str, view_id: str, replicas: int) -> tuple[bytes, dict[str, str]]:
    """The Edit modal of ``approval`` (opened on the call as stored) submitted by ``user`` with ``replicas``."""
    values = {"arg:name": {"value": {"type": "plain_text_input", "value": "api"}},
              "arg:replicas": {"value": {"type": "number_input", "value": str(replicas)}}}  # fmt: skip
    view = {"id": view_id, "callback_id": edit_modal.CALLBACK_ID, "state": {"values": values},
            "private_metadata": edits.ticket(approval, user)}  # fmt: skip
    return cost.Rig.form({"type": "view_submission", "user": {"id": user}, "view": view})


def _stored(approval: Approval) -> Approval:
    found = approvals.get_approval(approval.approval_id)
    assert found is not None
    return found


def _decision_records(rig: cost.Rig) -> list[dict[str, Any]]:
    """The de-duplication records a decision could have written (none is written any more)."""
    found = [snap.to_dict() or {} for snap in firestore.db().collection(firestore.EVENTS).stream()]
    return [record for record in found if record.get("type") == "decision"]


def test_an_approve_press_is_one_read_and_one_commit_of_four_writes_and_again_it_writes_nothing(
    fake_slack: FakeSlack, rig: cost.Rig
) -> None:
    """The press's commit writes the approval, its thread, the continuation and the asker, and claims no press. The
    same press delivered again finds its approval approved: nothing written, the operator told, one continuation."""
    session_id, approval = _approval_asked(rig)
    request = _decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID)
    first, again = dict[str, Any](), dict[str, Any]()
    ops = rig.measure(_click(request, first))
    assert first["decision"] == "decided"
    assert [rpc.split(" ")[0] for rpc in ops.trace] == ["BatchGetDocuments", "Commit"], ops.trace
    assert ops.writes == 4, ops.trace
    assert rig.measure(_click(request, again)).writes == 0
    assert again["decision"] == "already_decided"
    [note] = fake_slack.ephemerals(approval.card_place()[0], user=local.OPERATOR_ID)
    assert "already approved" in note["text"]
    assert (_stored(approval).status, _stored(approval).approved_by) == (ApprovalStatus.APPROVED, [local.OPERATOR_ID])
    assert _continuations(session_id) == [ids.resume_id(session_id, approval.seq)]
    assert _decision_records(rig) == []


@pytest.mark.parametrize("who", ["the same operator", "another operator"])
def test_two_approves_at_once_make_one_decision_and_the_loser_is_told(
    who: str, fake_slack: FakeSlack, two_operators: cost.Rig, held: Held
) -> None:
    """Held after its read, the first Approve loses to a second press (a double click, or another operator) that
    commits meanwhile: its fence fails, and the transaction finds the approval approved."""
    rig = two_operators
    session_id, approval = _approval_asked(rig)
    second = local.OPERATOR_ID if who == "the same operator" else SECOND
    first_reply, second_reply = dict[str, Any](), dict[str, Any]()
    held.race(_click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), first_reply),
              _click(_decision(approval, blocks.APPROVE_ACTION, second), second_reply))  # fmt: skip
    assert held.settled == [False]
    assert (second_reply["decision"], first_reply["decision"]) == ("decided", "already_decided")
    decided = _stored(approval)
    assert (decided.status, decided.approved_by, decided.decided_by) == (ApprovalStatus.APPROVED, [second], second)
    assert _continuations(session_id) == [ids.resume_id(session_id, approval.seq)]
    [note] = fake_slack.ephemerals(approval.card_place()[0], user=local.OPERATOR_ID)
    assert "already approved" in note["text"]
    assert _decision_records(rig) == []


def test_two_approvers_at_once_are_both_counted_and_resume_the_turn_once(
    fake_slack: FakeSlack, two_approvers: cost.Rig, held: Held
) -> None:
    """A rule of two approvers, both pressing at once: the second's partial commit moves the approval under the
    first's fence, and the first, deciding again, finds one approval of another person and completes it."""
    rig = two_approvers
    session_id, approval = _approval_asked(rig)
    assert approval.approvals_needed == 2
    first_reply, second_reply = dict[str, Any](), dict[str, Any]()
    held.race(_click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), first_reply),
              _click(_decision(approval, blocks.APPROVE_ACTION, SECOND), second_reply))  # fmt: skip
    assert True not in held.settled  # a count of one of two approvers is decided in the transaction, not fenced
    assert (second_reply["decision"], first_reply["decision"]) == ("decided", "decided")
    decided = _stored(approval)
    assert (decided.status, decided.approved_by) == (ApprovalStatus.APPROVED, [SECOND, local.OPERATOR_ID])
    assert _continuations(session_id) == [ids.resume_id(session_id, approval.seq)]
    assert fake_slack.ephemerals(approval.card_place()[0]) == []
    assert _decision_records(rig) == []


def test_one_approver_pressing_twice_at_once_under_a_two_approver_rule_is_counted_once(
    fake_slack: FakeSlack, two_approvers: cost.Rig, held: Held
) -> None:
    rig = two_approvers
    session_id, approval = _approval_asked(rig)
    first_reply, second_reply = dict[str, Any](), dict[str, Any]()
    held.race(_click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), first_reply),
              _click(_decision(approval, blocks.APPROVE_ACTION, local.OPERATOR_ID), second_reply))  # fmt: skip
    assert True not in held.settled  # a count of one of two approvers is decided in the transaction, not fenced
    assert (second_reply["decision"], first_reply["decision"]) == ("decided", "already_decided")
    pending = _stored(approval)
    assert (pending.status, pending.approved_by) == (ApprovalStatus.PENDING, [local.OPERATOR_ID])
    assert _continuations(session_id) == []
    [note] = fake_slack.ephemerals(approval.card_place()[0], user=local.OPERATOR_ID)
    assert "approved this call already" in note["text"]


def test_an_edit_held_while_another_approver_approves_starts_the_count_again_with_its_editor(
    two_approvers: cost.Rig, held: Held
) -> None:
    """The Approve commits between the edit's read and its commit: it counted for the call as it was, which the edit
    replaces; the edit, deciding again, counts its editor alone for the edited call."""
    rig = two_approvers
    session_id, approval = _approval_asked(rig)
    assert approval.schema is not None
    edit, approve = dict[str, Any](), dict[str, Any]()
    held.race(_click(_submission(approval, local.OPERATOR_ID, f"V{rig.uid}", 5), edit),
              _click(_decision(approval, blocks.APPROVE_ACTION, SECOND), approve))  # fmt: skip
    assert True not in held.settled  # a count of one of two approvers is decided in the transaction, not fenced
    assert (approve["decision"], edit) == ("decided", {})
    edited = _stored(approval)
    assert edited.status == ApprovalStatus.PENDING
    assert (edited.approved_by, edited.edited_by) == ([local.OPERATOR_ID], local.OPERATOR_ID)
    assert json.loads(edited.edited_args or "{}") == {"name": "api", "replicas": 5}
    assert _continuations(session_id) == []


def test_an_edit_submitted_again_after_it_counted_under_a_two_approver_rule_stands(two_approvers: cost.Rig) -> None:
    """The second submission of a double click read the approval only after the first committed: the call it sees
    is its own edit, approved by its editor, not "another edit" (a fresh clone's CI met this order)."""
    rig = two_approvers
    session_id, approval = _approval_asked(rig)
    submission = _submission(approval, local.OPERATOR_ID, f"V{rig.uid}", 5)
    first, again = dict[str, Any](), dict[str, Any]()
    _click(submission, first)()
    _click(submission, again)()
    assert (first, again) == ({}, {})
    edited = _stored(approval)
    assert (edited.status, edited.approved_by, edited.edited_by) == (
        ApprovalStatus.PENDING, [local.OPERATOR_ID], local.OPERATOR_ID)  # fmt: skip
    assert json.loads(edited.edited_args or "{}") == {"name": "api", "replicas": 5}
    assert _continuations(session_id) == []
    other = _submission(approval, local.OPERATOR_ID, f"W{rig.uid}", 6)  # an older editor with other arguments
    refused = dict[str, Any]()
    _click(other, refused)()
    assert "another edit" in json.dumps(refused), refused
    assert json.loads(_stored(approval).edited_args or "{}") == {"name": "api", "replicas": 5}


def test_an_edit_submitted_twice_at_once_under_a_two_approver_rule_counts_its_editor_once(
    fake_slack: FakeSlack, two_approvers: cost.Rig, held: Held
) -> None:
    """Its second commit lands between the first's read and its commit; the first, deciding again, finds its own edit
    running with its editor counted: the edit stands, nothing is written again, and a second approver completes it."""
    rig = two_approvers
    session_id, approval = _approval_asked(rig)
    submission = _submission(approval, local.OPERATOR_ID, f"V{rig.uid}", 5)
    first, again = dict[str, Any](), dict[str, Any]()
    held.race(_click(submission, first), _click(submission, again))
    assert True not in held.settled  # a count of one of two approvers is decided in the transaction, not fenced
    assert (first, again) == ({}, {})
    edited = _stored(approval)
    assert (edited.status, edited.approved_by, edited.edited_by) == (
        ApprovalStatus.PENDING, [local.OPERATOR_ID], local.OPERATOR_ID)  # fmt: skip
    approved = dict[str, Any]()
    cost.Rig.interactivity(cost.Rig.press(*_card(edited), action_id=blocks.APPROVE_ACTION, user=SECOND,
                                          value=blocks.approval_value(edited.approval_id, edited.edited_digest or "")),
                           approved)  # fmt: skip
    assert approved["decision"] == "decided"
    assert _stored(approval).approved_by == [local.OPERATOR_ID, SECOND]
    assert _continuations(session_id) == [ids.resume_id(session_id, approval.seq)]
    assert fake_slack.ephemerals(approval.card_place()[0]) == []
    assert _decision_records(rig) == []


def _card(approval: Approval) -> tuple[str, str, str]:
    channel, thread_ts = approval.card_place()
    return channel, approval.card_ts or "", thread_ts or approval.thread_ts


def test_a_reply_written_before_an_approval_card_was_posted_does_not_deny_it(rig: cost.Rig) -> None:
    """A reply whose ts is earlier than the card's (meant for the question the turn followed, read late) decides
    nothing: it takes the path of a reply with nothing pending (None); one written after the card denies it."""
    _, approval = _approval_asked(rig)
    card = Decimal(approval.card_ts or "0")
    early, late = f"{card - Decimal('0.000100'):.6f}", f"{card + Decimal('0.000100'):.6f}"
    thread = rig.session(approval.session_id).origin
    listed = [approval.approval_id]
    assert approvals_flow.deny_by_reply(open_approval_ids=listed, user=local.OPERATOR_ID, text="postgres",
                                        ts=early, channel=thread.channel) is None  # fmt: skip
    assert _stored(approval).status == ApprovalStatus.PENDING
    assert approvals_flow.deny_by_reply(open_approval_ids=listed, user=local.OPERATOR_ID, text="no",
                                        ts=late, channel=thread.channel) is not None  # fmt: skip
    assert (_stored(approval).status, _stored(approval).reason) == (ApprovalStatus.DENIED, "no")

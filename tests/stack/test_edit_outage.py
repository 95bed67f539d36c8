"""An Edit's decision committed and its continuation not queued (issue 25.2): the state a submission leaves when its
instance dies between the decision's transaction and the task's creation, or when Cloud Tasks is down then. The
editor submits the modal again (Slack showed it an error): the continuation is queued, and the edited call runs
once. In this process, through the interactivity handler, with Cloud Tasks down for the first submission."""

from __future__ import annotations

import pytest

from bench import cost
from bench.approve_run import submission
from infra.fakes.gemini.client import FakeGemini
from shared.handlers import slack_interactivity
from shared.state import approvals as stored
from shared.state import ids
from shared.state.models import ApprovalStatus, SessionStatus, WaitKind
from tests.rigs import Outage, queued_again
from tests.stack.test_approvals import executions

pytestmark = pytest.mark.stack
G = FakeGemini


def test_a_submission_again_after_its_decision_found_no_queue_queues_the_edited_run_once(
    rig: cost.Rig, outage: Outage
) -> None:
    """Defect: the second submission found the approval decided and answered "already approved by you" without
    queueing its continuation, which then waited for the sweep."""
    session_id = rig.start("scale the api")
    rig.script(G.call("scale_service", name="api", replicas=3), G.text("Scaled to 5."))
    rig.deliver(session_id)
    [approval] = stored.get_approvals(rig.session(session_id).awaited(WaitKind.APPROVAL))
    request = submission(approval, 5)
    outage.down = True
    _, status = slack_interactivity.handle(*request)
    assert status == 503  # Slack shows the modal an error; the decision is recorded
    continuation = ids.resume_id(session_id, approval.seq)
    assert rig.session(continuation).status == SessionStatus.QUEUED
    decided = stored.get_approval(approval.approval_id)
    assert decided is not None
    assert (decided.status, decided.edited_by) == (ApprovalStatus.APPROVED, "U0OPERATOR")
    # the editor submits again: the edit stands (the modal closes), and its continuation is queued and runs
    queued_again(rig, outage, slack_interactivity.handle, request, continuation, reply={})
    assert [e["replicas"] for e in executions(session_id)] == [5]

"""A delegated child ended abandoned in its own run (``shared.agent.ending.Ender.abandoned``: a question of the turn
it was about to pause on was closed unanswered while the turn ran). A child reports once: what it delegated, its
non-blocking children too, has nobody to report to after that, so its end stops them, as a redelivery of its ended
task (``shared.usecases.worker._after_child_end``) and the sweep's abandon of a child do.

On the real stack, but the end itself is run here, in the test process, on the child as its held worker has it
(a child cannot ask the operator through the product's tools today: ``ask_operator`` is withheld from it and an MCP
server's request for input is refused to it, so nothing reaches that end on the stack by itself).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.agent.ending import Ender
from shared.agent.pausing import Pauses
from shared.agent.run_state import RunState
from shared.state import ids, sessions, steps
from shared.state.models import SessionStatus
from tests.agent_helpers import mention, wait_status
from tests.poll import wait_for
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import child_requests, for_child

pytestmark = pytest.mark.stack
G = FakeGemini


@pytest.mark.timeout(240)
def test_a_child_abandoned_in_its_run_stops_its_non_blocking_children(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the end stopped only the blocking children its turn waited on; a non-blocking grandchild ran on and
    ended done, its result going nowhere (its parent had reported already). Now it is stopped with the child's end."""
    task, side = f"deploy through a helper {uid}", f"tidy the logs {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))),
                       FakeGemini.matching(f"[C{uid}]", G.text("The helper stopped.")))  # fmt: skip
    for_child(fake_gemini, task, idless(("delegate", {"task": side, "blocking": False})),
              G.delayed(40, G.text("never said")))  # its worker held in its second turn  # fmt: skip
    for_child(fake_gemini, side, G.delayed(40, G.text("The logs are tidy.")))  # still running at its parent's end
    thread = mention(fake_slack, f"C{uid}", "deploy it through a helper")
    child_id = ids.child_id(thread.session_id, 1, 0)
    grandchild = ids.child_id(child_id, 1, 0)
    wait_for(lambda: len(child_requests(fake_gemini, task)) >= 2, timeout=90, what="the child's second turn")
    wait_for(lambda: child_requests(fake_gemini, side), timeout=90, what="the grandchild's turn")
    child = sessions.get_session(child_id)
    assert child is not None
    assert child.status == SessionStatus.RUNNING
    run = SimpleNamespace(session=child, steps=steps.load_steps(child_id), surface=None, record_calls=lambda: None)
    closed = {ids.question_id(child_id, 2, 0): "cancelled"}  # as a newer question in the thread closes it
    ended = Ender(cast(RunState, run), cast(Pauses, None)).abandoned(steps.TurnAbandoned([], closed))
    assert ended == SessionStatus.ABANDONED
    assert wait_status(child_id, SessionStatus.ABANDONED).status == SessionStatus.ABANDONED
    stopped = wait_status(grandchild, SessionStatus.STOPPED, SessionStatus.DONE, timeout=120)
    assert stopped.status == SessionStatus.STOPPED  # before: it ran on and ended done, its result read by nobody

"""The short fault-injection run (issue 19, with issue 24.8 and 24.9's faults): a fixed seed, one flow of every kind,
faults injected as ``make faults`` injects them, on a stack of its own; every loss and duplicate count is 0 and every
flow reaches its end."""

from __future__ import annotations

import pytest

from faults import report
from faults import run as fault_run
from faults.flows import KINDS
from tests.conftest import TEST_DIR

pytestmark = pytest.mark.stack
SEED = 11  # SIGKILLs, Gemini 429, slow and malformed replies, duplicate deliveries, Slack retries and storms, restarts
# killed_no_retry waits out a dead worker's lease before its takeover: a short one (as the suite's stack has), so the
# run waits 20 s for it rather than the product's 60.
LEASE = "20"


@pytest.mark.timeout(600)  # one flow of every kind, in batches of three, on a stack of its own
def test_a_short_fault_run_loses_and_duplicates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Among them the operator answering while Cloud Tasks is down (the ingress answers 503, Slack's redelivery
    queues the continuation), and a worker killed with no redelivery, taken over by a thread message once its lease
    has run out."""
    monkeypatch.setitem(fault_run.ENV, "SESSION_LEASE_SECONDS", LEASE)
    results = fault_run.run(seed=SEED, flows=len(KINDS), batch=3, stack_dir=TEST_DIR / "faults", kinds=KINDS)
    print(report.table(results))
    assert report.problems(results) == []
    assert {r["name"]: r["value"] for r in report.records(results) if r["target"] == 0} == {
        "flows not at their expected end": 0,
        "answers lost": 0,
        "continuations duplicated": 0,
        "posts duplicated": 0,
        "tools executed more than once": 0,
        "sessions stuck": 0,
    }
    assert sorted(o.name.split()[0] for o in results.outcomes) == sorted(KINDS)
    # The seed injects these, or the run proves less than it says.
    assert {"agent_session SIGKILL", "Gemini malformed function call", "duplicate parallel task delivery",
            "Slack event retry", "Firestore emulator restart", "Cloud Tasks emulator restart",
            "Slack storm outlasting the session's budget", "Cloud Tasks outage during an answer",
            "agent_session SIGKILL, Cloud Tasks not retrying"} <= set(results.injected)  # fmt: skip

"""Limits and cost (issue 18): every model turn's tokens are recorded, and the session keeps the totals."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.logs import TRACE_FIELD
from shared.state import ids, steps
from shared.state.models import AuditType, SessionStatus
from tests import delivery
from tests.agent_helpers import conversation_done, mention, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def test_token_totals_equal_the_sum_of_the_models_usage(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("read_thread", limit=2), G.call("read_thread", limit=3), G.text("Read twice."))
    thread = mention(fake_slack, f"C{uid}", "read it twice")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    replies = [r["reply"]["usage"] for r in fake_gemini.requests() if f"C{uid}" in str(r["body"])]
    assert len(replies) == 3
    expected = {
        "prompt": sum(u["promptTokenCount"] for u in replies),
        "cached": sum(u.get("cachedContentTokenCount", 0) for u in replies),
        "output": sum(u["candidatesTokenCount"] for u in replies),
        "thinking": sum(u.get("thoughtsTokenCount", 0) for u in replies),
    }
    assert done.limits.tokens == expected
    per_turn = [e.tokens for s in steps.load_steps(thread.session_id) for e in s.audit if e.type == AuditType.MODEL]
    assert [t["prompt"] for t in per_turn if t] == [u["promptTokenCount"] for u in replies]


def test_the_admin_usage_report_adds_up_per_session_user_and_channel(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    from ops import admin

    script(G.text("One."))
    thread = mention(fake_slack, f"C{uid}", "one turn")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    created = done.created_at
    day = datetime(created.year, created.month, created.day, tzinfo=UTC)
    report = admin.usage(day)
    [line] = [line for line in report if thread.session_id in line]
    assert f"{done.limits.tokens['prompt']:,}" in line
    sessions = report[1 : report.index("")]  # the header and one line per session, in aligned columns
    assert len({len(row) for row in sessions}) == 1  # every column as wide in every row, numbers to the right
    assert "$" in line
    assert any(line.strip().startswith(thread.channel) for line in report[report.index(next(
        line for line in report if line.startswith("PER CHANNEL"))):])  # fmt: skip


def test_one_trace_across_ingress_deliveries_and_the_continuation(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Every log line of a session, from the ingress, each task delivery (a duplicate one too) and the session that
    continues it, carries the same trace in Cloud Logging's trace field."""
    script(G.call("ask_operator", question="Go?", options=["yes", "no"]), G.text("Went."))
    thread = mention(fake_slack, f"C{uid}", "trace me")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    fake_slack.user_message(local.OPERATOR_ID, thread.channel, "1", thread_ts=thread.ts)
    continuation = ids.resumed_by(paused.awaited_question or "")
    wait_status(continuation, SessionStatus.DONE, timeout=30)
    delivery.deliver(stack.function_url("agent_session"), thread.session_id, task="late-duplicate")

    def traces() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for name in ("slack_events", "agent_session"):
            for line in (stack.logs_dir / f"{name}.log").read_text().splitlines():
                if line.startswith("{") and (thread.session_id in line or continuation in line):
                    entry = json.loads(line)
                    if entry.get("session_id") in {thread.session_id, continuation}:
                        found.setdefault(name, set()).add(str(entry.get(TRACE_FIELD)))
        return found

    found = wait_for(lambda: traces() if len(traces().get("agent_session", set()) | set()) else None, timeout=60,
                     what="the session's log lines")  # fmt: skip
    everything = set().union(*found.values())
    assert set(found) == {"slack_events", "agent_session"}
    assert len(everything) == 1, found
    [trace] = everything
    assert trace.startswith(f"projects/{local.PROJECT}/traces/")


def test_a_delegated_child_logs_under_its_parents_trace(stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini,
                                                         uid: str) -> None:  # fmt: skip
    task = json.dumps({"task": f"count the rows {uid}"})
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=f"count the rows {uid}")),
        FakeGemini.matching(task, G.text("12 rows.")),
        FakeGemini.matching(f"[C{uid}]", G.text("There are 12 rows.")),
    )
    thread = mention(fake_slack, f"C{uid}", "count the rows")
    conversation_done(thread.session_id, timeout=60)
    child = ids.child_id(thread.session_id, 1, 0)

    def traces() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for line in (stack.logs_dir / "agent_session.log").read_text().splitlines():
            if line.startswith("{") and child in line:
                entry = json.loads(line)
                if entry.get("session_id") in {thread.session_id, child}:
                    found.setdefault(str(entry["session_id"]), set()).add(str(entry.get(TRACE_FIELD)))
        return found

    found = wait_for(lambda: traces() if child in traces() else None, timeout=60, what="the child's log lines")
    [trace] = found[child]
    assert found[thread.session_id] == {trace}  # the parent's lines that name the child (it started it)
    assert trace.startswith(f"projects/{local.PROJECT}/traces/")

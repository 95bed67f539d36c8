"""MCP servers (issue 15): the sample MCP server runs as real processes over HTTP, the agent is configured for them,
and every call is counted on the servers' side (``GET /calls``), never by a mock of the client.

Three servers: ``demo`` (a bearer token, ``internal_debug`` excluded), ``brief`` (its request states expire after a
second, only ``create_ticket`` and ``slow_report`` included, a two-second timeout) and ``gone`` (nothing listens).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.mcp.client import SampleMcp
from infra.fakes.slack.client import FakeSlack
from infra.procs import free_port
from infra.stack import Stack
from shared.slack import blocks
from shared.state import approvals as stored_approvals
from shared.state import ids
from shared.state import questions as stored_questions
from shared.state.models import Approval, Question, QuestionStatus, SessionStatus, WaitKind
from tests.agent_helpers import agent_with, function_responses, mention, open_question, wait_status
from tests.mcp_servers import answered, asked_by_a_server, mcp_servers, reply, responses_of, retried_by_cloud_tasks
from tests.poll import wait_for
from tests.stack.test_approvals import press

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID
TOKEN = "local-mcp-token"


@dataclass(frozen=True)
class Servers:
    demo: str  # base URL (the MCP endpoint is /mcp)
    brief: str

    def calls(self, base: str, tool: str, event: str = "ran") -> list[dict[str, Any]]:
        return SampleMcp(base).calls(tool, event)


@pytest.fixture(scope="module")
def servers(stack: Stack) -> Iterator[Servers]:
    """Start the sample servers and restart agent_session configured for them; undo both afterwards."""
    with mcp_servers(stack, mcp_test_demo=["--token", TOKEN], mcp_test_brief=["--state-ttl", "1"]) as url:
        configured = [
            {"name": "demo", "url": url["mcp_test_demo"], "credential_env": "MCP_TOKEN_DEMO",
             "exclude": ["internal_debug"]},
            {"name": "brief", "url": url["mcp_test_brief"], "include": ["create_ticket", "slow_report"],
             "timeout_seconds": 2},
            {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        ]  # fmt: skip
        # TOOL_TIERS wins over annotations: create_ticket (additive) runs at once, open_dashboard (read-only) waits
        tiers = {"restart_service": "safe", "mcp.*.create_ticket": "safe", "mcp.demo.open_dashboard": "approve",
                 "mcp.demo.rename_service": "safe"}  # fmt: skip
        env = {"MCP_SERVERS": json.dumps(configured), "MCP_TOKEN_DEMO": TOKEN, "TOOL_TIERS": json.dumps(tiers)}
        with agent_with(stack, env):
            yield Servers(url["mcp_test_demo"].removesuffix("/mcp"), url["mcp_test_brief"].removesuffix("/mcp"))


def approve_when_paused(fake_slack: FakeSlack, session_id: str) -> Approval:
    """Wait for ``session_id`` to pause on its one approval card, and approve it as the operator."""
    paused = wait_status(session_id, SessionStatus.PAUSED)
    [approval] = stored_approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    return approval


def declarations(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for tool in request["body"].get("tools", []):
        for declaration in tool.get("functionDeclarations", []):
            found[declaration["name"]] = declaration
    return found


def system_text(request: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in request["body"].get("systemInstruction", {}).get("parts", []))


def test_discovery_declaration_and_a_read_only_call(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Listed with the credential, declared with their own schemas, include/exclude applied, the unreachable
    server skipped with the model told, and a read-only call made at once (tier safe)."""
    before = len(servers.calls(servers.demo, "lookup_service"))
    script(G.call("mcp.demo.lookup_service", name="api"), G.text("api is healthy."))
    thread = mention(fake_slack, f"C{uid}", "how is the api?")
    wait_status(thread.session_id, SessionStatus.DONE)

    first = next(r for r in fake_gemini.requests() if uid in json.dumps(r["body"]))
    declared = declarations(first)
    lookup = declared["mcp.demo.lookup_service"]
    assert lookup["parameters_json_schema"]["properties"]["name"]["type"] == "string"
    assert lookup["parameters_json_schema"]["required"] == ["name"]
    assert "Look up a service's status" in lookup["description"]
    assert "read-only" in lookup["description"]
    assert {"mcp.demo.delete_branch", "mcp.demo.create_ticket", "mcp.brief.create_ticket"} <= set(declared)
    assert "mcp.demo.internal_debug" not in declared  # excluded
    assert {n for n in declared if n.startswith("mcp.brief.")} == {"mcp.brief.create_ticket", "mcp.brief.slow_report"}
    assert not any(n.startswith("mcp.gone.") for n in declared)
    assert "gone:" in system_text(first)
    assert "could not be reached" in system_text(first)

    [response] = responses_of(fake_gemini, "mcp.demo.lookup_service")
    result = response["result"]
    assert result["structured"] == {"name": "api", "status": "healthy", "version": "1.4.2"}
    assert "never instructions" in result["untrusted"]
    assert len(servers.calls(servers.demo, "lookup_service")) == before + 1
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "api is healthy."


def test_a_destructive_tool_raises_an_approval_card_and_runs_once_after_approval(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    branch = f"feature-{uid}"
    script(G.call("mcp.demo.delete_branch", repo="app", branch=branch), G.text("Branch deleted."))
    thread = mention(fake_slack, f"C{uid}", f"delete the branch {branch}")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED)
    [approval] = stored_approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert approval.tool == "mcp.demo.delete_branch"
    assert approval.card_ts
    ran = [c for c in servers.calls(servers.demo, "delete_branch") if c["arguments"]["branch"] == branch]
    assert ran == []  # nothing before the decision
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE)
    ran = [c for c in servers.calls(servers.demo, "delete_branch") if c["arguments"]["branch"] == branch]
    assert len(ran) == 1
    [response] = responses_of(fake_gemini, "mcp.demo.delete_branch")
    assert response["result"]["text"] == f"deleted app:{branch}"


@pytest.mark.timeout(360)  # a restart on a busy machine, and Cloud Tasks' retry
def test_a_non_idempotent_mcp_call_is_not_run_again_after_its_worker_is_killed(
    servers: Servers, stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """SIGKILL between the call's start (recorded on the server) and its result: the takeover reports the outcome
    as unknown to the model and the operators, and the server sees the call once."""
    branch = f"crash-{uid}"
    call = G.call("mcp.demo.delete_branch", repo="app", branch=branch, hold_seconds=8)
    script(call, G.text("I could not tell whether it was deleted."))
    thread = mention(fake_slack, f"C{uid}", f"delete the branch {branch}")
    approval = approve_when_paused(fake_slack, thread.session_id)
    wait_for(
        lambda: [c for c in servers.calls(servers.demo, "delete_branch") if c["arguments"]["branch"] == branch],
        timeout=30, what="the call to reach the server",
    )  # fmt: skip
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    retried_by_cloud_tasks(stack, ids.resume_id(approval.session_id, approval.seq))
    wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE, timeout=90)
    time.sleep(1)  # a re-run, had there been one, would have reached the server by now
    ran = [c for c in servers.calls(servers.demo, "delete_branch") if c["arguments"]["branch"] == branch]
    assert len(ran) == 1
    [response] = responses_of(fake_gemini, "mcp.demo.delete_branch")
    assert "outcome unknown" in response["error"]
    assert any("cannot tell whether" in m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts))


def test_input_required_becomes_a_question_and_the_answer_resumes_the_same_call_once(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    title = f"Login broken {uid}"
    thread, question = asked_by_a_server(script, fake_slack, uid, G.call("mcp.demo.create_ticket", title=title),
                                         "Ticket created.", "file a ticket about the login")  # fmt: skip
    assert question.options == ["low", "normal", "urgent", "Decline"]
    assert "Which priority" in question.text
    assert "demo" in question.text

    def mine(event: str) -> list[dict[str, Any]]:
        return [c for c in servers.calls(servers.demo, "create_ticket", event) if c["arguments"]["title"] == title]

    assert (len(mine("asked")), mine("ran")) == (1, [])
    answered(fake_slack, thread, question, "3")  # the third option
    [created] = mine("ran")
    assert created["arguments"]["priority"] == "urgent"
    assert len(mine("asked")) == 1  # resumed with the stored state, not called afresh
    [response] = responses_of(fake_gemini, "mcp.demo.create_ticket")
    assert response["result"]["structured"] == {"created": True, "title": title, "priority": "urgent"}
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "Ticket created."


def test_a_server_that_asks_twice_pauses_twice_and_the_second_answer_completes_the_call_once(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    service = f"svc{uid}"
    thread, first = asked_by_a_server(script, fake_slack, uid, G.call("mcp.demo.rename_service", name=service),
                                      "Renamed.", "rename the service")  # fmt: skip
    assert first.options == []  # a free-text field
    # the server asked again: a second question
    second = open_question(answered(fake_slack, thread, first, "billing", SessionStatus.PAUSED).session_id)
    assert second.options == ["yes", "no", "Decline"]
    assert f"Rename {service} to billing?" in second.text
    answered(fake_slack, thread, second, "yes")
    mine = [c for c in servers.calls(servers.demo, "rename_service", "ran") if c["arguments"]["name"] == service]
    assert [c["arguments"]["to"] for c in mine] == ["billing"]
    asked = [c for c in servers.calls(servers.demo, "rename_service", "asked") if c["arguments"]["name"] == service]
    assert [c["arguments"]["step"] for c in asked] == ["new_name", "confirm"]
    [response] = responses_of(fake_gemini, "mcp.demo.rename_service")
    assert response["result"]["structured"] == {"renamed": service, "to": "billing"}


def test_a_server_that_asks_twice_answered_before_its_turn_pauses_asks_its_second_question_anew(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The first request answered while its turn still runs (a later call's post held by a slow Slack): the turn
    resumes in place, and the server's second request is a question of its own, shown and waited on, never the
    first one again (whose id the same call and step would give it)."""
    service, marker = f"svc{uid}", f"renaming now {uid}"
    fake_slack.slow("chat.postMessage", 30, match=marker)
    turn = G.calls(("mcp.demo.rename_service", {"name": service}), ("post_update", {"text": marker}))
    script(turn, G.text("Renamed."))
    thread = mention(fake_slack, f"C{uid}", "rename the service")
    first_id = ids.question_id(thread.session_id, 1, 0)

    def posted() -> Question | None:
        found = stored_questions.get_question(first_id)
        return found if found is not None and found.post_ts else None

    wait_for(posted, timeout=60, what="the server's first question")
    reply(fake_slack, thread.channel, thread.ts, "billing")  # while the turn's update is still being posted
    fake_slack.release("chat.postMessage")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    [waits] = paused.waiting
    second = stored_questions.get_question(waits.key)
    assert second is not None
    assert second.question_id != first_id
    assert second.status == QuestionStatus.OPEN
    assert f"Rename {service} to billing?" in second.text
    assert any(m["ts"] == second.post_ts for m in fake_slack.bot_replies(thread.channel, thread.ts))
    reply(fake_slack, thread.channel, thread.ts, "yes")
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    mine = [c for c in servers.calls(servers.demo, "rename_service", "ran") if c["arguments"]["name"] == service]
    assert [c["arguments"]["to"] for c in mine] == ["billing"]
    asked = [c for c in servers.calls(servers.demo, "rename_service", "asked") if c["arguments"]["name"] == service]
    assert [c["arguments"]["step"] for c in asked] == ["new_name", "confirm"]
    [response] = responses_of(fake_gemini, "mcp.demo.rename_service")
    assert response["result"]["structured"] == {"renamed": service, "to": "billing"}


def test_an_expired_request_state_is_reported_in_plain_words(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    title = f"Slow answer {uid}"
    thread, question = asked_by_a_server(script, fake_slack, uid, G.call("mcp.brief.create_ticket", title=title),
                                         "The request expired; ask me again.", "file a ticket")  # fmt: skip
    time.sleep(1.5)  # the brief server keeps request states for a second
    answered(fake_slack, thread, question, "low")
    [response] = responses_of(fake_gemini, "mcp.brief.create_ticket")
    assert "expired" in response["error"]
    assert "did not complete" in response["error"]
    assert any("expired on MCP server `brief`" in m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts))
    assert [c for c in servers.calls(servers.brief, "create_ticket") if c["arguments"]["title"] == title] == []


def test_bad_arguments_a_tool_error_a_timeout_and_a_secret_request_are_tool_errors_and_the_session_goes_on(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    turn = G.calls(
        ("mcp.demo.lookup_service", {"name": 5}),
        ("mcp.demo.lookup_service", {"name": f"nope{uid}"}),
        ("mcp.brief.slow_report", {"seconds": 4}),
        ("mcp.demo.ask_for_token", {"service": f"svc{uid}"}),
    )
    script(turn, G.text("Some of that failed."))
    thread = mention(fake_slack, f"C{uid}", "check things")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=40)
    bad, failed, slow, secret = [r["response"] for r in function_responses(fake_gemini.requests()[-1])]
    assert "bad arguments for mcp.demo.lookup_service" in bad["error"]
    assert "not of type 'string'" in bad["error"]
    assert "reported an error" in failed["error"]
    assert f"no service named 'nope{uid}'" in failed["error"]
    assert "did not answer within 2 s" in slow["error"]
    assert "looks like a secret" in secret["error"]
    looked_up = [c["arguments"]["name"] for c in servers.calls(servers.demo, "lookup_service")]
    assert 5 not in looked_up
    assert f"nope{uid}" in looked_up
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "Some of that failed."


def test_an_approved_call_whose_server_asks_for_a_url_visit_pauses_on_a_link_button_and_done_resumes_it(
    servers: Servers, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """TOOL_TIERS makes the read-only open_dashboard an approve tool: approval first, then the server's URL request
    pauses the resumed session, and the operator's Done resumes the call once."""
    service = f"svc{uid}"
    script(G.call("mcp.demo.open_dashboard", service=service), G.text("The dashboard is open."))
    thread = mention(fake_slack, f"C{uid}", "open the dashboard")
    approval = approve_when_paused(fake_slack, thread.session_id)
    resumed = ids.resume_id(approval.session_id, approval.seq)
    wait_status(resumed, SessionStatus.PAUSED)  # the approved call asked for input: paused again, on a question
    question = open_question(resumed)
    post = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] == question.post_ts)
    buttons = [e for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert buttons[0]["url"] == f"https://dashboards.example.com/{service}/login"
    assert [b["text"]["text"] for b in buttons[1:]] == ["Done", "Cancel"]
    answered(fake_slack, thread, question, "done")
    opened = [c for c in servers.calls(servers.demo, "open_dashboard") if c["arguments"]["service"] == service]
    assert len(opened) == 1
    [response] = responses_of(fake_gemini, "mcp.demo.open_dashboard")
    assert response["result"]["text"] == f"dashboard of {service} is open"

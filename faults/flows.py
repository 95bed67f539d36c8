"""The flows a fault run drives, each scripted on the fake Gemini by its own marker, and what its end must be.

Every flow runs in its own channel ``C<marker>``; the mention carries ``[C<marker>]``, so the scripted replies
match only its conversation. ``run`` drives it as people would (a mention, the operator's answer, an Approve
click) while the injector adds faults; ``check`` reads the evidence from Firestore, the fake Slack's messages, the
fake Gemini's requests and the MCP server's own record of calls.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from faults.inject import HELD_SECONDS, Injector, deliver, requests_with, texts_of
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlackError
from shared.slack import approval_card, blocks
from shared.state import approvals, firestore, ids, questions, sessions
from shared.state.models import Approval, QuestionStatus, SessionKind, SessionStatus, WaitKind
from shared.state.session_model import Session

G = FakeGemini
HUMAN = "U0HUMAN"
OPERATOR = local.OPERATOR_ID
KINDS = ("plain", "ask", "approve", "delegate", "mcp_read", "mcp_input", "mcp_elicit", "outage", "mixed",
         "tasks_outage_answer", "killed_no_retry", "edit", "mixed_waits")  # fmt: skip
# A session that ended, or paused and then handed on to the session its answer started.
SETTLED = {SessionStatus.DONE, SessionStatus.RESUMED}
# An outage flow's session must end failed: Slack refuses its answer for longer than any budget.
OUTAGE_END = {SessionStatus.FAILED}
OUTAGE_REASON = "Slack asked me to wait 3600 s"
WAIT = 150.0  # the bounded wait for a flow to reach its end
SETTLE = 30.0  # and for its sessions to end once it has


@dataclass
class Outcome:
    """What one flow's evidence shows; every count but ``reached_end`` must be 0."""

    name: str
    reached_end: bool = False
    problem: str = ""
    answers_lost: int = 0
    continuations_duplicated: int = 0
    posts_duplicated: int = 0
    tools_run_twice: int = 0
    stuck: int = 0
    faults: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the counts that are not 0 saw

    def counts(self) -> dict[str, int]:
        """The counts that are not 0."""
        names = ("answers_lost", "continuations_duplicated", "posts_duplicated", "tools_run_twice", "stuck")
        return {name: int(getattr(self, name)) for name in names if getattr(self, name)}


@dataclass
class Flow:
    kind: str
    marker: str  # unique per flow and run: "F<seed>x<n>"
    injector: Injector
    rng: random.Random  # this flow's own, drawn from the run's seed: its choices replay whatever the threads do
    outcome: Outcome = field(init=False)
    root: str = ""  # the mention's session
    thread_ts: str = ""
    question_id: str = ""
    storm: tuple[str, str] | None = None  # a storm on another Slack method: (kind, method)
    told: bool = False  # an outage flow: whether Slack takes the failure notice

    def __post_init__(self) -> None:
        self.outcome = Outcome(name=f"{self.kind} {self.marker}")
        # Drawn first, before the flow runs: the run puts a flow that kills its worker in a batch of its own.
        self.model_fault = Injector.choose_model_fault(
            self.rng, may_kill=self.kind not in {"delegate", "mixed", "mixed_waits"}
        )
        if self.kind == "killed_no_retry":  # its worker is killed whatever was drawn: it runs in a batch of its own
            self.model_fault = "agent_session SIGKILL"

    @property
    def kills(self) -> bool:
        return self.model_fault == "agent_session SIGKILL"

    @property
    def channel(self) -> str:
        return f"C{self.marker}"

    @property
    def tag(self) -> str:
        return f"[{self.channel}]"

    @property
    def tasks(self) -> list[str]:
        return [f"migrate the orders table {self.marker}", f"count the users {self.marker}"]

    @property
    def final(self) -> str:
        return f"Finished {self.kind} for {self.marker}."

    # -- driving ---------------------------------------------------------------------------
    def run(self) -> Outcome:
        try:
            DRIVERS[self.kind](self)
            self.outcome.reached_end = True
        except (AssertionError, TimeoutError, requests.RequestException) as exc:
            self.outcome.problem = f"{type(exc).__name__}: {exc}"
        self.settle()
        self.check()
        if self.outcome.problem or self.outcome.counts():
            self.keep_evidence()
        return self.outcome

    def unsettled(self) -> list[Session]:
        """The flow's sessions not at a legitimate end (terminal, or handed on to the session an answer started)."""
        ends = SETTLED | OUTAGE_END if self.kind == "outage" else SETTLED
        for _ in range(60):
            try:
                return [s for s in sessions_where("channel", self.channel) if s.status not in ends]
            except gexc.GoogleAPICallError:  # the Firestore emulator is restarting: ask again
                time.sleep(1.0)
        return [s for s in sessions_where("channel", self.channel) if s.status not in ends]

    def settle(self, timeout: float = SETTLE) -> None:
        """Give the flow's sessions a bounded while to end (a session ends just after its last post)."""
        deadline = time.monotonic() + timeout
        while self.unsettled() and time.monotonic() < deadline:
            time.sleep(0.5)

    def keep_evidence(self) -> None:
        """The flow's model requests and Slack messages, for whoever replays its seed."""
        where = self.injector.stack.stack_file.parent / "evidence"
        where.mkdir(parents=True, exist_ok=True)
        evidence = {
            "outcome": self.outcome.__dict__,
            "model_requests": [r for r in self.injector.gemini.requests() if self.tag in texts_of(r)],
            "messages": self.injector.slack.messages(self.channel),
            "sessions": [s.to_doc() for s in sessions_where("channel", self.channel)],
        }
        (where / f"{self.marker}.json").write_text(json.dumps(evidence, indent=1, default=str))

    def script(self, first: dict[str, Any], *rest: dict[str, Any]) -> str:
        """Queue the flow's replies, its model fault's items before the first; returns the fault's kind."""
        opening = self.injector.model_fault(self.rng, self.model_fault, self.tag, first)
        self.injector.gemini.script(*opening, *(G.matching(self.tag, item) for item in rest))
        if self.model_fault != "none":
            self.outcome.faults.append(self.model_fault)
        return self.model_fault

    def mention(self, text: str, model_fault: str) -> None:
        before = requests_with(self.injector.gemini, self.tag)
        self.injector.slack_storm(self.rng, self.tag)
        self.storm = self.injector.other_storm(self.rng, self.kind, self.channel)
        sent = self.injector.slack.user_message(HUMAN, self.channel, f"<@{local.BOT_USER_ID}> {text} {self.tag}")
        self.retried(sent)
        [event] = [d for d in sent["deliveries"] if d["type"] == "app_mention"]
        self.thread_ts, self.root = sent["ts"], ids.session_for_event(event["event_id"])
        self.injector.event_retry(self.rng, event["event_id"])
        self.injector.model_injected(model_fault, self.tag, before)
        if model_fault != "agent_session SIGKILL":  # a copy that claims the session and is then killed waits its lease
            self.injector.duplicate_delivery(self.rng, self.root)

    def answer(self, session_id: str, text: str) -> str:
        """Wait for ``session_id`` to pause on a question, and answer it in the thread as the operator."""
        paused = wait_status(session_id, {SessionStatus.PAUSED})
        assert paused.awaited_question, f"{session_id} paused without a question"
        self.question_id = paused.awaited_question
        self.retried(self.injector.slack.user_message(OPERATOR, self.channel, text, thread_ts=self.thread_ts))
        return ids.resumed_by(self.question_id)

    def retried(self, sent: dict[str, Any]) -> None:
        """Slack delivers again what the app did not acknowledge (a 503 while Cloud Tasks restarts, a slow answer);
        here seconds apart, doubling, instead of minutes (the ingress's channel to Cloud Tasks reconnects with its own
        backoff once the emulator is back)."""
        for delivery in sent["deliveries"]:
            status, wait = delivery["status"], 1.0
            while status != 200 and wait < 20:
                time.sleep(wait)
                status, wait = self.injector.slack.redeliver(delivery["event_id"])["status"], wait * 2

    def wait_final(self) -> None:
        deadline = time.monotonic() + WAIT
        while self.final not in self.texts():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.final!r} was never posted")
            time.sleep(0.2)

    def texts(self) -> list[str]:
        return [str(m["text"]) for m in self.injector.slack.bot_replies(self.channel, self.thread_ts)]

    def count_storm(self, kind: str, method: str) -> None:
        """Count the storm on another method if the flow's calls show it hit (a 429 or 5xx answer in its channel)."""
        refused = [c for c in self.injector.slack.calls(method) if c["status"] != 200
                   and self.channel in (c["args"].get("channel"), c["args"].get("channel_id"))]  # fmt: skip
        if refused:
            self.injector.count(kind)
            self.outcome.faults.append(f"{kind} ({method})")

    def note(self, problem: str) -> None:
        self.outcome.notes.append(problem)

    # -- checking --------------------------------------------------------------------------
    def check(self) -> None:
        texts = self.texts() if self.thread_ts else []
        self.outcome.posts_duplicated = sum(n - 1 for n in Counter(texts).values())
        if self.question_id:
            # The session paused on the question resumes in one continuation, whatever delivered its answer.
            asker = ids.asker_of_question(self.question_id) or ""
            continuations = [s for s in sessions_where("asker_session_id", asker)
                             if s.kind == SessionKind.CONTINUATION]  # fmt: skip
            self.outcome.continuations_duplicated = max(0, len(continuations) - 1)
            question = questions.get_question(self.question_id)
            if question is None or question.status != QuestionStatus.ANSWERED:
                self.outcome.answers_lost += 1
        if self.storm is not None:
            self.count_storm(*self.storm)
        stuck = self.unsettled()
        self.outcome.stuck = len(stuck)
        if stuck:
            self.note("stuck: " + ", ".join(f"{s.session_id} {s.kind.value} {s.status.value}" for s in stuck))
        if self.kind in CHECKS:
            CHECKS[self.kind](self)


def wait_status(session_id: str, statuses: set[SessionStatus], timeout: float = WAIT) -> Session:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = sessions.get_session(session_id)
        except gexc.GoogleAPICallError:  # the Firestore emulator is restarting: look again
            found = None
        if found is not None and found.status in statuses:
            return found
        if time.monotonic() > deadline:
            now = found.status.value if found else "missing"
            raise TimeoutError(f"session {session_id} is {now}, not {sorted(s.value for s in statuses)}")
        time.sleep(0.2)


def sessions_where(name: str, value: str) -> list[Session]:
    query = firestore.db().collection(firestore.SESSIONS).where(filter=FieldFilter(name, "==", value))
    return [Session.from_doc(doc.to_dict() or {}) for doc in query.stream()]


def function_results(request: dict[str, Any]) -> list[Any]:
    """The results of every function response in a recorded model request."""
    found = []
    for content in request["body"].get("contents", []):
        for part in content.get("parts", []):
            response = part.get("functionResponse") or part.get("function_response")
            if response:
                found.append(response["response"].get("result"))
    return found


def last_request_with(flow: Flow, text: str) -> dict[str, Any]:
    matching = [r for r in flow.injector.gemini.requests() if text in texts_of(r)]
    assert matching, f"no model request carries {text!r}"
    return matching[-1]


# -- the flows -------------------------------------------------------------------------------
def plain(flow: Flow) -> None:
    fault = flow.script(G.text(flow.final))
    flow.mention("say hello", fault)
    flow.wait_final()


def ask(flow: Flow) -> None:
    question = f"Which region for {flow.marker}?"
    fault = flow.script(G.call("ask_operator", question=question, options=["us-central1", "europe-west1"]),
                        G.text(flow.final))  # fmt: skip
    flow.mention("deploy it", fault)
    continuation = flow.answer(flow.root, "2")
    wait_status(continuation, {SessionStatus.DONE})
    flow.wait_final()


def check_ask(flow: Flow) -> None:
    texts = flow.texts()
    if sum(f"Which region for {flow.marker}?" in t for t in texts) > 1:
        flow.outcome.posts_duplicated += 1  # the question posted twice
    if flow.outcome.reached_end:
        results = function_results(last_request_with(flow, flow.tag))
        if not any(isinstance(r, dict) and r.get("matched_option") == "europe-west1" for r in results):
            flow.outcome.answers_lost += 1


def _held_scale_call(flow: Flow) -> tuple[Approval, str]:
    """The model asks to scale to 3 and the call is held: its approval, and the value its card's buttons carry."""
    fault = flow.script(G.call("scale_service", name=f"api-{flow.marker}", replicas=3), G.text(flow.final))
    flow.mention("scale the api", fault)
    paused = wait_status(flow.root, {SessionStatus.PAUSED})
    [approval] = approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    return approval, blocks.approval_value(approval.approval_id, approval.digest)


def _until_answered(press: Callable[[], dict[str, Any]]) -> Callable[[], None]:
    """A person's press that Slack does not deliver again: one who sees it fail (a 503 while Cloud Tasks restarts)
    presses again, and the decision already recorded creates its continuation's task (issue 24.8)."""

    def pressed() -> None:
        for _ in range(4):
            if press().get("status") == 200:
                return
            time.sleep(2.0)

    return pressed


def _approved_in_parallel(flow: Flow, approval: Approval) -> None:
    """The operator presses Approve (perhaps several times at once); the turn's continuation runs to its end."""
    value = blocks.approval_value(approval.approval_id, approval.digest)
    click = _until_answered(lambda: flow.injector.slack.click(OPERATOR, flow.channel, approval.card_ts or "",
                                                              blocks.APPROVE_ACTION, value=value))  # fmt: skip
    in_parallel(click, times=flow.injector.clicks(flow.rng))
    wait_status(ids.resume_id(approval.session_id, approval.seq), {SessionStatus.DONE})
    flow.wait_final()


def approve(flow: Flow) -> None:
    approval, _value = _held_scale_call(flow)
    _approved_in_parallel(flow, approval)


def check_approve(flow: Flow) -> None:
    ran = demo_actions(flow.root)
    flow.outcome.tools_run_twice = max(0, ran - 1)
    if flow.outcome.reached_end and ran == 0:
        flow.outcome.problem = flow.outcome.problem or "approved, but scale_service never ran"


EDITED_REPLICAS = 7  # what the operator's edit makes of the model's 3


def edit(flow: Flow) -> None:
    """The model asks to scale to 3; the operator presses Edit, and submits 7 (the injector's clicks submit it
    several times at once, as a double submission); the edited call runs once and the model is told."""
    approval, value = _held_scale_call(flow)
    slack = flow.injector.slack

    def opened() -> dict[str, Any] | None:
        mine = [v for v in slack.views(OPERATOR) if str(v.get("private_metadata", "")).startswith(approval.approval_id)]
        return mine[0] if mine else None

    view = None
    for _ in range(4):  # a press answered 503 (Cloud Tasks restarting) is pressed again, as an operator would
        slack.click(OPERATOR, flow.channel, approval.card_ts or "", approval_card.EDIT_ACTION, value=value)
        deadline = time.monotonic() + 10
        while (view := opened()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if view is not None:
            break
    assert view is not None, "the Edit modal never opened"

    def submit() -> None:
        try:
            _until_answered(lambda: slack.submit_view(view["id"], OPERATOR, {"arg:replicas": str(EDITED_REPLICAS)}))()
        except FakeSlackError as exc:
            if "not_found" not in str(exc):
                raise  # not_found: another submission of the double submit closed the modal, Slack accepts no more

    in_parallel(submit, times=flow.injector.clicks(flow.rng))
    wait_status(ids.resume_id(approval.session_id, approval.seq), {SessionStatus.DONE})
    flow.wait_final()


def check_edit(flow: Flow) -> None:
    query = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", flow.root))
    ran = [doc.to_dict() or {} for doc in query.stream()]
    flow.outcome.tools_run_twice = max(0, len(ran) - 1)
    if any(r.get("replicas") != EDITED_REPLICAS for r in ran):
        flow.outcome.tools_run_twice += 1
        flow.note(f"a call other than the edited one ran: {ran}")
    if flow.outcome.reached_end and not ran:
        flow.outcome.problem = flow.outcome.problem or "edited and approved, but scale_service never ran"
    if flow.outcome.reached_end:
        results = function_results(last_request_with(flow, flow.tag))
        if not any(isinstance(r, dict) and r.get("replicas") == EDITED_REPLICAS for r in results):
            flow.outcome.answers_lost += 1  # the edited call's result never reached the model
            flow.note("the edited call's result never reached the model")


def demo_actions(session_id: str) -> int:
    """How often a demo tool (restart_service, scale_service) really ran for a session, counted in Firestore."""
    query = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", session_id))
    return sum(1 for _ in query.stream())


def delegate(flow: Flow) -> None:
    """Two blocking children; the first asks its parent (blocking ask_parent), the parent answers with answer_child."""
    tasks = flow.tasks
    fault = flow.script(G.calls(*(("delegate", {"task": t}) for t in tasks)))
    gemini = flow.injector.gemini
    # The child asks a second after it starts: by then the parent's answer below is scripted with the child's id.
    gemini.script(*(G.matching(json.dumps({"task": tasks[0]}), item) for item in (
        G.delayed(1.0, G.call("ask_parent", question=f"Which database for {flow.marker}?", blocking=True)),
        G.text(f"Migrated the orders of {flow.marker} to postgres."),
    )))  # fmt: skip
    gemini.script(G.matching(json.dumps({"task": tasks[1]}), G.text(f"{flow.marker} has 20 users.")))
    flow.mention("migrate the orders and count the users", fault)
    seq = 2 if fault == "Gemini malformed function call" else 1  # the malformed reply is a step of its own
    gemini.script(*(G.matching(flow.tag, item) for item in (
        G.call("answer_child", child_id=ids.child_id(flow.root, seq, 0), answer="postgres"),
        G.text(f"I answered the helper of {flow.marker}."),
        G.text(flow.final),
    )))  # fmt: skip
    for n in range(2):
        wait_status(ids.child_id(flow.root, seq, n), {SessionStatus.DONE})
    flow.wait_final()


def check_delegate(flow: Flow) -> None:
    if not flow.outcome.reached_end:
        return
    results = function_results(last_request_with(flow, json.dumps({"task": flow.tasks[0]})))
    if not any(isinstance(r, dict) and r.get("answer") == "postgres" for r in results):
        flow.outcome.answers_lost += 1  # the parent's answer never reached the child
    final = json.dumps(last_request_with(flow, flow.tag)["body"])  # function responses are not text parts
    for result in (f"Migrated the orders of {flow.marker} to postgres.", f"{flow.marker} has 20 users."):
        if result not in final:
            flow.outcome.answers_lost += 1
            flow.note(f"{result!r} never reached the parent")


def mixed(flow: Flow) -> None:
    """One turn whose calls carry no ids (as Gemini 2.x sends them): two blocking children, a delegate refused at
    once and a tool that answers at once. Each call must get its own response, the turn resume once."""
    tasks = flow.tasks
    calls = [("delegate", {"task": tasks[0]}), ("read_thread", {"limit": 1}), ("delegate", {"task": " "}),
             ("delegate", {"task": tasks[1]})]  # fmt: skip
    fault = flow.script({"function_calls": [{"name": n, "args": a, "id": None} for n, a in calls]}, G.text(flow.final))
    gemini = flow.injector.gemini
    gemini.script(G.matching(json.dumps({"task": tasks[0]}), G.delayed(1.0, G.text(f"{flow.marker}: orders moved."))))
    gemini.script(G.matching(json.dumps({"task": tasks[1]}), G.text(f"{flow.marker} has 20 users.")))
    flow.mention("migrate the orders and count the users", fault)
    flow.wait_final()


def check_mixed(flow: Flow) -> None:
    children = [s for s in sessions_where("channel", flow.channel) if s.kind == SessionKind.CHILD]
    flow.outcome.tools_run_twice += max(0, len(children) - 2)  # a delegate call run again starts another child
    for task in flow.tasks:
        asked = [r for r in flow.injector.gemini.requests() if json.dumps({"task": task}) in texts_of(r)]
        flow.outcome.tools_run_twice += max(0, len(asked) - 1)
    if not flow.outcome.reached_end:
        return
    results = function_results(last_request_with(flow, flow.tag))
    expected = [f"{flow.marker}: orders moved.", f"{flow.marker} has 20 users."]
    if [r for r in results if isinstance(r, str)] != expected:
        flow.outcome.answers_lost += 1
        flow.note(f"the children's results reached the parent as {results!r}")


def mixed_waits(flow: Flow) -> None:
    """One turn, calls without ids, that waits on three kinds of things at once (issue 23): an operator question,
    an approve-tier call and a blocking child, beside a call answered at once. The operator answers and approves
    (presses delivered in parallel), the child ends; the turn resumes once, each call with its own response."""
    calls = [
        ("ask_operator", {"question": f"Which region for {flow.marker}?"}),
        ("read_thread", {"limit": 1}),
        ("scale_service", {"name": f"api-{flow.marker}", "replicas": 3}),
        ("delegate", {"task": flow.tasks[0]}),
    ]
    fault = flow.script({"function_calls": [{"name": n, "args": a, "id": None} for n, a in calls]}, G.text(flow.final))
    gemini = flow.injector.gemini
    gemini.script(G.matching(json.dumps({"task": flow.tasks[0]}), G.text(f"{flow.marker}: orders moved.")))
    flow.mention("pick a region, scale the api and migrate the orders", fault)
    flow.answer(flow.root, "europe-west1")
    paused = wait_status(flow.root, {SessionStatus.PAUSED, SessionStatus.RESUMED})
    [approval] = approvals.get_approvals([ids.approval_id(flow.root, paused.waiting[0].seq, 2)])
    _approved_in_parallel(flow, approval)


def check_mixed_waits(flow: Flow) -> None:
    ran = demo_actions(flow.root)
    flow.outcome.tools_run_twice += max(0, ran - 1)
    children = [s for s in sessions_where("channel", flow.channel) if s.kind == SessionKind.CHILD]
    flow.outcome.tools_run_twice += max(0, len(children) - 1)
    if not flow.outcome.reached_end:
        return
    results = function_results(last_request_with(flow, flow.tag))
    answered = [r for r in results if isinstance(r, dict) and r.get("answer") == "europe-west1"]
    scaled = [r for r in results if isinstance(r, dict) and r.get("replicas") == 3]
    moved = [r for r in results if r == f"{flow.marker}: orders moved."]
    if (len(answered), len(scaled), len(moved)) != (1, 1, 1) or ran != 1:
        flow.outcome.answers_lost += 1
        flow.note(f"the turn's calls got {results!r} (scale_service ran {ran} times)")


def mcp_read(flow: Flow) -> None:
    fault = flow.script(G.call("mcp.demo.lookup_service", name="api"), G.text(flow.final))
    flow.mention("how is the api?", fault)
    wait_status(flow.root, {SessionStatus.DONE})
    flow.wait_final()


def _call_asking_the_operator(flow: Flow, call: dict[str, Any], request: str, answer: str) -> None:
    """The model makes ``call``, which asks the operator; ``answer`` resumes it once and the session ends."""
    flow.mention(request, flow.script(call, G.text(flow.final)))
    wait_status(flow.answer(flow.root, answer), {SessionStatus.DONE})
    flow.wait_final()


def mcp_input(flow: Flow) -> None:
    """An MCP tool whose input the operator gives: the answer resumes the call once."""
    call = G.call("mcp.demo.create_ticket", title=f"Login broken {flow.marker}")
    _call_asking_the_operator(flow, call, "file a ticket about the login", "3")


def mcp_elicit(flow: Flow) -> None:
    """An MCP server that asks the way the SDK teaches (a resolver returning ``Elicit``, issue 24.10): the
    operator is asked, and the answer resumes the call once."""
    call = G.call("mcp.demo.deploy_service", service=f"svc-{flow.marker}")
    _call_asking_the_operator(flow, call, "deploy the service", "production")


def check_mcp_input(flow: Flow) -> None:
    check_mcp_ran(flow, "create_ticket", "title", f"Login broken {flow.marker}")


def check_mcp_elicit(flow: Flow) -> None:
    check_mcp_ran(flow, "deploy_service", "service", f"svc-{flow.marker}")


def check_mcp_ran(flow: Flow, tool: str, argument: str, value: str) -> None:
    """The sample server ran the flow's call once (its own record), and at least once if the flow reached its end."""
    mcp = flow.injector.stack.url("mcp_demo")
    calls: list[dict[str, Any]] = requests.get(f"{mcp}/calls", timeout=10).json()
    ran = [c for c in calls if c["tool"] == tool and c["event"] == "ran" and c["arguments"].get(argument) == value]
    flow.outcome.tools_run_twice = max(0, len(ran) - 1)
    if flow.outcome.reached_end and not ran:
        flow.outcome.answers_lost += 1


def outage(flow: Flow) -> None:
    """A plain question whose answer Slack refuses with a Retry-After of an hour: the session must not sleep, must
    not be retried for ever, and must end failed with the reason stored; the notice is posted if Slack takes it."""
    fault = flow.script(G.text(flow.final))
    flow.told = flow.rng.random() < 0.5  # the storm refuses the answer only, or the failure notice too
    flow.injector.outlasting_storm(flow.channel, 1 if flow.told else 50)
    flow.mention("say hello", fault)
    ended = wait_status(flow.root, {SessionStatus.FAILED, SessionStatus.DONE})
    assert ended.status == SessionStatus.FAILED, f"{flow.root} ended {ended.status.value} through the storm"
    if flow.told:
        deadline = time.monotonic() + WAIT
        while not any(OUTAGE_REASON in t for t in flow.texts()):
            if time.monotonic() > deadline:
                raise TimeoutError("the failure notice was never posted")
            time.sleep(0.2)


def check_outage(flow: Flow) -> None:
    """The failure is persisted with its plain reason; nothing was posted but the notice (if Slack took it)."""
    ended = sessions.get_session(flow.root) if flow.root else None
    if ended is None or ended.status != SessionStatus.FAILED or OUTAGE_REASON not in (ended.error or ""):
        flow.outcome.answers_lost += 1  # the outcome would be silent
        flow.note(f"not a plain failure: {ended.status.value if ended else 'missing'} {ended.error if ended else ''}")
    if flow.final in flow.texts():
        flow.outcome.problem = flow.outcome.problem or "the answer was posted through a storm that refused it"


def tasks_outage_answer(flow: Flow) -> None:
    """The operator answers while Cloud Tasks is down: the ingress records the answer and its continuation, answers
    503 within Slack's 3 s, and Slack's redelivery (once Cloud Tasks is back) creates the continuation's task."""
    fault = flow.script(G.call("ask_operator", question=f"Which zone for {flow.marker}?", options=["a", "b"]),
                        G.text(flow.final))  # fmt: skip
    flow.mention("pick a zone", fault)
    paused = wait_status(flow.root, {SessionStatus.PAUSED})
    assert paused.awaited_question, f"{flow.root} paused without a question"
    flow.question_id = paused.awaited_question or ""
    slack = flow.injector.slack
    sent = flow.injector.tasks_down_while(lambda: slack.user_message(OPERATOR, flow.channel, "b",
                                                                     thread_ts=flow.thread_ts))  # fmt: skip
    flow.outcome.faults.append("Cloud Tasks outage during an answer")
    for delivery in sent["deliveries"]:  # a 503 (or, on a loaded machine, Slack's 3 s out), never an error
        assert delivery["status"] in {200, 503, None}, f"the answer during the outage was answered {delivery}"
    flow.retried(sent)  # Slack delivers it again once Cloud Tasks is back
    wait_status(ids.resumed_by(flow.question_id), {SessionStatus.DONE})
    flow.wait_final()


def killed_no_retry(flow: Flow) -> None:
    """A worker SIGKILLed inside a model call whose task Cloud Tasks does not deliver again (retries spent): its
    heartbeat stops, its lease runs out within SESSION_LEASE_SECONDS, and a message in the thread then starts the
    takeover at once, without the rescue job."""
    injector = flow.injector
    flow.thread_ts = injector.slack.user_message(HUMAN, flow.channel, f"deploy it {flow.tag}")["ts"]  # no mention
    queued = Session.new(session_id=f"noretry-{flow.marker}", kind=SessionKind.MENTION, channel=flow.channel,
                         thread_ts=flow.thread_ts, trigger_ts=flow.thread_ts, trigger_user=HUMAN,
                         text=f"deploy it {flow.tag}", created_at=firestore.now())  # fmt: skip
    firestore.session_ref(queued.session_id).create(queued.to_doc())
    flow.root = queued.session_id
    first = G.matching(flow.tag, G.text(flow.final))
    injector.gemini.script(G.delayed(HELD_SECONDS, first), first)
    before = requests_with(injector.gemini, flow.tag)
    once = threading.Thread(target=deliver, args=(injector.stack, queued.session_id, f"noretry-{flow.marker}", 0),
                            kwargs={"max_attempts": 1}, daemon=True)  # fmt: skip
    once.start()
    injector.kill_when_held(flow.tag, before, kind="agent_session SIGKILL, Cloud Tasks not retrying")
    flow.outcome.faults.append("agent_session SIGKILL, Cloud Tasks not retrying")
    deadline = time.monotonic() + WAIT
    while not lease_expired(queued.session_id):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the dead worker's lease on {queued.session_id} never ran out")
        time.sleep(0.5)
    injector.slack.user_message(HUMAN, flow.channel, f"are you still there? {flow.tag}", thread_ts=flow.thread_ts)
    flow.wait_final()


def lease_expired(session_id: str) -> bool:
    try:
        found = sessions.get_session(session_id)
    except gexc.GoogleAPICallError:
        return False
    lease = found.lease.until if found is not None else None
    return found is not None and found.status == SessionStatus.RUNNING and lease is not None and lease < firestore.now()


def in_parallel(action: Callable[[], Any], *, times: int) -> None:
    threads = [threading.Thread(target=action) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


DRIVERS: dict[str, Callable[[Flow], None]] = {
    "plain": plain, "ask": ask, "approve": approve, "edit": edit, "delegate": delegate, "mcp_read": mcp_read,
    "mcp_input": mcp_input, "mcp_elicit": mcp_elicit, "outage": outage, "mixed": mixed,
    "tasks_outage_answer": tasks_outage_answer, "killed_no_retry": killed_no_retry, "mixed_waits": mixed_waits,
}  # fmt: skip
CHECKS: dict[str, Callable[[Flow], None]] = {
    "ask": check_ask, "approve": check_approve, "edit": check_edit, "delegate": check_delegate,
    "mcp_input": check_mcp_input,
    "mcp_elicit": check_mcp_elicit, "outage": check_outage, "mixed": check_mixed, "mixed_waits": check_mixed_waits,
}  # fmt: skip

"""The dispatcher (``infra/fakes/dispatch``): tasks delivered as Cloud Tasks delivers them, and its controls.

The dispatcher runs as its own process, as the local stack runs it, against a small loopback target of this
module's own that records every request and answers as the task's body asks (sleep, fail the first attempts).
Tasks reach it the way the Cloud Tasks emulator sends them (``POST /`` with its headers) or through
``/deliver``. The last test runs a whole stack with ``parallel_tasks=True``.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from infra import stack as local
from infra.fakes.dispatch import Dispatcher, DispatcherError
from infra.fakes.dispatch.__main__ import READY_PREFIX
from infra.fakes.dispatch.state import Policy
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.procs import StackError, free_port
from tests.poll import wait_for
from tests.served import served
from tests.slack import SlackSender, mention
from tests.spawned import spawn_fake, stop_fake

QUEUE = "projects/p/locations/l/queues/agent-sessions"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- the target: records every request, answers as the body says --------------------------------


@dataclass
class Seen:
    """One request the target received."""

    headers: dict[str, str]
    body: bytes
    started: float
    ended: float | None = None

    @property
    def session(self) -> str:
        return str(json.loads(self.body)["session_id"])

    @property
    def retry(self) -> int:
        return int(self.headers["x-cloudtasks-taskretrycount"])


@dataclass
class Target:
    server: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/run"

    def requests(self, session: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.session == session]


class _TargetHandler(BaseHTTPRequestHandler):
    """The body is ``{"session_id", "sleep", "sleep_first", "fail_first", "status"}``: sleep ``sleep`` seconds
    (``sleep_first`` only on the first attempt), and answer ``status`` (default 500) to the first ``fail_first``
    attempts, 200 after."""

    target: Target

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen = Seen({k.lower(): v for k, v in self.headers.items()}, body, time.time())
        with self.target.lock:
            self.target.seen.append(seen)
        spec = json.loads(body)
        retry = seen.retry
        time.sleep(spec.get("sleep", 0) + (spec.get("sleep_first", 0) if retry == 0 else 0))
        status = spec.get("status", 500) if retry < spec.get("fail_first", 0) else 200
        seen.ended = time.time()
        try:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except OSError:
            pass  # the dispatcher stopped waiting (its deadline)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    class Handler(_TargetHandler):
        pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    found = Target(server)
    Handler.target = found
    with served(server):
        yield found


# -- the dispatcher process ----------------------------------------------------------------------


@dataclass
class Running:
    proc: subprocess.Popen[str]
    url: str
    control: Dispatcher
    log_path: Path

    def send(self, session: str, *, task: str | None = None, **spec: Any) -> dict[str, Any]:
        """Dispatch a task as the Cloud Tasks emulator does: POST with its headers (full queue path, short name)."""
        body = json.dumps({"session_id": session, **spec}).encode()
        request = urllib.request.Request(self.url + "/", data=body, method="POST")  # noqa: S310 - loopback
        for name, value in {
            "Content-Type": "application/json",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "X-CloudTasks-QueueName": QUEUE,
            "X-CloudTasks-TaskName": task or f"t-{session}",
            "X-CloudTasks-TaskRetryCount": "0",
            "X-CloudTasks-TaskExecutionCount": "0",
            "X-CloudTasks-TaskETA": "1700000000.5",
        }.items():
            request.add_header(name, value)
        with NO_PROXY.open(request, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            assert response.status == 200
        return answer


def _start(log_path: Path, *flags: str) -> Running:
    proc, url = spawn_fake("dispatch", READY_PREFIX, log_path, *flags)
    return Running(proc, url, Dispatcher(url), log_path)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def run(*flags: str) -> Running:
        running = _start(tmp_path / f"dispatch-{len(started)}.log", *flags)
        started.append(running)
        return running

    try:
        yield run
    finally:
        for running in started:
            stop_fake(running.proc)


FAST = ("--min-backoff", "0.1", "--max-backoff", "0.4", "--max-attempts", "4", "--max-retry-duration", "0",
        "--deadline", "1.5")  # fmt: skip


@pytest.fixture(scope="module")
def shared_dispatcher(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = _start(tmp_path_factory.mktemp("dispatch") / "dispatch.log", "--target", target.url, *FAST)
    try:
        yield running
    finally:
        stop_fake(running.proc)


@pytest.fixture
def dispatcher(shared_dispatcher: Running) -> Iterator[Running]:
    shared_dispatcher.control.reset()
    yield shared_dispatcher
    shared_dispatcher.control.reset()


def _unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


# -- what it sends ---------------------------------------------------------------------------------


def test_headers_and_body_are_cloud_tasks_own(dispatcher: Running, target: Target) -> None:
    session = _unique("headers")
    answer = dispatcher.send(session, task="abc123-headers")
    assert answer["task"] == "abc123-headers"
    dispatcher.control.wait_idle()
    [seen] = target.requests(session)
    assert seen.headers["x-cloudtasks-queuename"] == "agent-sessions"  # the short name, as Cloud Tasks sends
    assert seen.headers["x-cloudtasks-taskname"] == "abc123-headers"
    assert seen.headers["x-cloudtasks-taskretrycount"] == "0"
    assert seen.headers["x-cloudtasks-taskexecutioncount"] == "0"
    assert float(seen.headers["x-cloudtasks-tasketa"]) == 1700000000.5
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")  # the task's own header
    assert seen.headers["user-agent"] == "Google-Cloud-Tasks"
    assert "x-cloudtasks-taskpreviousresponse" not in seen.headers
    assert not [name for name in seen.headers if name.startswith("x-appengine-")]
    assert json.loads(seen.body) == {"session_id": session}
    [attempt] = dispatcher.control.deliveries(session)
    assert attempt["task"] == "abc123-headers"
    assert attempt["queue"] == "agent-sessions"
    assert attempt["session_id"] == session
    assert (attempt["attempt"], attempt["status"], attempt["outcome"]) == (0, 200, "ok")
    assert attempt["duplicate"] is False
    assert attempt["source"] == "tasks"
    assert attempt["started"] <= attempt["ended"]


def test_tasks_are_answered_at_once_and_delivered_in_parallel(dispatcher: Running, target: Target) -> None:
    sessions = [_unique(f"par{n}") for n in range(6)]
    for session in sessions:
        dispatcher.send(session, sleep=1)
    sent = time.time()
    dispatcher.control.wait_idle()
    seen = [s for session in sessions for s in target.requests(session)]
    assert len(seen) == 6
    assert sent < min(s.ended or 0 for s in seen), "the emulator must not wait for the delivery"
    # Every request started before any of them ended: all six were in flight at once.
    assert max(s.started for s in seen) < min(s.ended or 0 for s in seen)
    attempts = [a for session in sessions for a in dispatcher.control.deliveries(session)]
    assert max(a["started"] for a in attempts) < min(a["ended"] for a in attempts)


def test_concurrency_is_capped_per_queue(start: Callable[..., Running], target: Target) -> None:
    capped = start("--target", target.url, "--max-concurrent", "2")
    sessions = [_unique(f"cap{n}") for n in range(4)]
    for session in sessions:
        capped.send(session, sleep=0.4)
    capped.control.wait_idle()
    attempts = sorted((a for s in sessions for a in capped.control.deliveries(s)), key=lambda a: a["started"])
    assert len(attempts) == 4
    for attempt in attempts:  # how many were in flight when each one started
        assert len([a for a in attempts if a["started"] <= attempt["started"] < a["ended"]]) <= 2
    assert attempts[2]["started"] >= min(a["ended"] for a in attempts[:2]) - 0.01


# -- retries ---------------------------------------------------------------------------------------


def test_a_500_is_retried_with_growing_backoff_and_retry_count(dispatcher: Running, target: Target) -> None:
    session = _unique("retry")
    dispatcher.send(session, fail_first=3)
    dispatcher.control.wait_idle()
    attempts = dispatcher.control.deliveries(session)
    assert [a["attempt"] for a in attempts] == [0, 1, 2, 3]
    assert [a["status"] for a in attempts] == [500, 500, 500, 200]
    assert [a["outcome"] for a in attempts] == ["http_error"] * 3 + ["ok"]
    seen = target.requests(session)
    assert [s.retry for s in seen] == [0, 1, 2, 3]
    assert [s.headers["x-cloudtasks-taskexecutioncount"] for s in seen] == ["0"] * 4  # 5xx are not executions
    assert [s.headers.get("x-cloudtasks-taskpreviousresponse") for s in seen] == [None, "500", "500", "500"]
    etas = [float(s.headers["x-cloudtasks-tasketa"]) for s in seen]
    assert etas[0] == 1700000000.5
    assert etas[1] < etas[2] < etas[3]  # a retry's ETA is the time it was scheduled for
    # Waits of 0.1, 0.2 and 0.4 s (the cap) between the end of one attempt and the start of the next.
    gaps = [b["started"] - a["ended"] for a, b in itertools.pairwise(attempts)]
    policy = Policy(min_backoff=0.1, max_backoff=0.4)
    for retry, gap in enumerate(gaps, start=1):
        assert policy.backoff(retry) - 0.02 <= gap < policy.backoff(retry) + 0.3, gaps
    assert gaps[0] < gaps[1] < gaps[2]


def test_a_4xx_is_retried_too_and_counts_as_an_execution(dispatcher: Running, target: Target) -> None:
    session = _unique("four")
    dispatcher.send(session, fail_first=2, status=404)
    dispatcher.control.wait_idle()
    seen = target.requests(session)
    assert [s.headers["x-cloudtasks-taskexecutioncount"] for s in seen] == ["0", "1", "2"]
    assert [s.headers.get("x-cloudtasks-taskpreviousresponse") for s in seen] == [None, "404", "404"]


def test_it_gives_up_after_max_attempts(dispatcher: Running, target: Target) -> None:
    session = _unique("never")
    dispatcher.send(session, fail_first=99)
    dispatcher.control.wait_idle()
    assert [a["status"] for a in dispatcher.control.deliveries(session)] == [500] * 4
    assert len(target.requests(session)) == 4


def test_a_missed_deadline_is_a_failed_attempt_while_the_first_still_runs(dispatcher: Running, target: Target) -> None:
    """Cloud Tasks stops waiting at the dispatch deadline and retries; the handler may still be running."""
    session = _unique("deadline")
    dispatcher.send(session, sleep_first=3)
    dispatcher.control.wait_idle(timeout=60)
    first, second = dispatcher.control.deliveries(session)
    assert (first["attempt"], first["status"], first["outcome"]) == (0, 0, "deadline")
    assert 1.4 <= first["ended"] - first["started"] < 2.5
    assert (second["attempt"], second["status"], second["outcome"]) == (1, 200, "ok")
    one, two = target.requests(session)
    assert one.ended is None or two.started < one.ended, "the retry arrives while the first attempt still runs"
    assert "x-cloudtasks-taskpreviousresponse" not in two.headers


def test_retries_go_on_past_max_attempts_until_the_retry_duration_has_passed(start: Callable[..., Running]) -> None:
    """As Cloud Tasks: a target that is down for longer than max_attempts' quick backoffs (a function restarting
    after a crash) still gets the task, because retrying stops only once max_retry_duration has passed too."""
    port = free_port()
    down = start("--target", f"http://127.0.0.1:{port}/", "--max-attempts", "2", "--min-backoff", "0.05",
                 "--max-backoff", "0.2", "--max-retry-duration", "120")  # fmt: skip
    down.send("comes-back")
    wait_for(lambda: len(down.control.deliveries("comes-back")) >= 4, timeout=60, what="four refused attempts")

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", port), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        down.control.wait_idle(timeout=60)
        outcomes = [a["outcome"] for a in down.control.deliveries("comes-back")]
        assert outcomes[-1] == "ok"
        assert len(outcomes) > 2, "delivered after more attempts than max_attempts"
        assert set(outcomes[:-1]) == {"connection_error"}
    finally:
        server.shutdown()
        server.server_close()


def test_a_connection_error_is_retried(start: Callable[..., Running]) -> None:
    nowhere = start("--target", f"http://127.0.0.1:{free_port()}/", "--max-attempts", "3", "--min-backoff", "0.05",
                    "--max-retry-duration", "0")  # fmt: skip
    nowhere.send("refused")
    nowhere.control.wait_idle()
    attempts = nowhere.control.deliveries("refused")
    outcomes = [(a["attempt"], a["status"], a["outcome"]) for a in attempts]
    assert outcomes == [(n, 0, "connection_error") for n in range(3)]
    assert "Connection" in attempts[0]["error"]


# -- controls -------------------------------------------------------------------------------------


def test_a_second_task_of_the_same_name_is_dropped_as_cloud_tasks_refuses_it(
    dispatcher: Running, target: Target
) -> None:
    """The emulator accepts a task name twice; Cloud Tasks answers ALREADY_EXISTS, so only the first is delivered."""
    session = _unique("named")
    assert dispatcher.send(session, task=f"{session}-task")["accepted"]
    assert dispatcher.send(session, task=f"{session}-task")["accepted"] == []
    assert dispatcher.send(session, task=f"{session}-task-rescue")["accepted"]  # another name is another task
    dispatcher.control.wait_idle()
    assert len(target.requests(session)) == 2


def test_duplicate_delivers_the_next_matching_task_k_times_at_once(dispatcher: Running, target: Target) -> None:
    prefix = _unique("dup")
    dispatcher.control.duplicate(prefix, copies=3, tasks=1)
    dispatcher.send(f"{prefix}-a", task=f"{prefix}-task-a", sleep=0.4)
    dispatcher.control.wait_idle()
    dispatcher.send(f"{prefix}-b", task=f"{prefix}-task-b")  # the rule is used up
    dispatcher.control.wait_idle()
    seen = target.requests(f"{prefix}-a")
    assert len(seen) == 3
    assert {s.headers["x-cloudtasks-taskname"] for s in seen} == {f"{prefix}-task-a"}
    assert max(s.started for s in seen) < min(s.ended or 0 for s in seen)
    attempts = dispatcher.control.deliveries(f"{prefix}-a")
    assert sorted(a["duplicate"] for a in attempts) == [False, True, True]
    assert len({a["delivery"] for a in attempts}) == 3
    assert len(target.requests(f"{prefix}-b")) == 1
    assert dispatcher.control.status()["rules"]["duplicates"] == []


def test_hold_keeps_matching_tasks_back_until_released_together(dispatcher: Running, target: Target) -> None:
    prefix = _unique("hold")
    control = dispatcher.control
    control.hold(f"{prefix}-cont")
    dispatcher.send(f"{prefix}-cont-1")
    dispatcher.send(f"{prefix}-cont-2")
    dispatcher.send(f"{prefix}-other")
    held = control.wait_held(2, match=prefix)
    assert {h["session_id"] for h in held} == {f"{prefix}-cont-1", f"{prefix}-cont-2"}
    control.wait_for_deliveries(1, f"{prefix}-other", ok=True)
    assert not control.idle()
    assert target.requests(f"{prefix}-cont-1") == []
    released_at = time.time()
    assert control.release(f"{prefix}-cont") == 2
    control.wait_idle()
    starts = [s.started for n in (1, 2) for s in target.requests(f"{prefix}-cont-{n}")]
    assert len(starts) == 2
    assert max(starts) - min(starts) < 2  # together, not one after the other's end
    assert min(starts) >= released_at
    held_for = [a["held_seconds"] for a in control.deliveries(f"{prefix}-cont")]
    assert all(h > 0 for h in held_for)


def test_holding_releases_on_the_way_out(dispatcher: Running, target: Target) -> None:
    session = _unique("ctx")
    with dispatcher.control.holding(session):
        dispatcher.send(session)
        dispatcher.control.wait_held(1, match=session)
    dispatcher.control.wait_idle()
    assert len(target.requests(session)) == 1


def test_delay_sends_matching_tasks_late_and_others_meanwhile(dispatcher: Running, target: Target) -> None:
    prefix = _unique("delay")
    dispatcher.control.delay(f"{prefix}-slow", 0.6, tasks=1)
    sent = time.time()
    dispatcher.send(f"{prefix}-slow", sleep=0.2)
    dispatcher.send(f"{prefix}-fast", sleep=0.2)
    dispatcher.control.wait_idle()
    [slow] = target.requests(f"{prefix}-slow")
    [fast] = target.requests(f"{prefix}-fast")
    assert fast.started < slow.started
    assert slow.started - sent >= 0.6
    [attempt] = dispatcher.control.deliveries(f"{prefix}-slow")
    assert attempt["delay"] == 0.6


def test_deliver_is_an_extra_delivery_now(dispatcher: Running, target: Target) -> None:
    session = _unique("extra")
    answer = dispatcher.control.deliver(session_id=session, task="extra-task", copies=2, wait=True, timeout=10)
    assert answer["finished"] is True
    assert sorted((a["status"], a["duplicate"], a["source"]) for a in answer["attempts"]) == [
        (200, False, "deliver"),
        (200, True, "deliver"),
    ]
    seen = target.requests(session)
    assert [s.headers["x-cloudtasks-taskname"] for s in seen] == ["extra-task", "extra-task"]
    assert {s.headers["x-cloudtasks-queuename"] for s in seen} == {"default"}
    assert {s.headers["content-type"] for s in seen} == {"application/json"}


def test_reset_forgets_the_log_and_the_rules_and_drops_what_waits(dispatcher: Running, target: Target) -> None:
    session = _unique("reset")
    control = dispatcher.control
    control.hold(session)
    control.duplicate("anything", copies=2)
    dispatcher.send(session)
    control.wait_held(1, match=session)
    dispatcher.send(_unique("logged"))
    control.wait_for_deliveries(1)
    control.reset()
    control.wait_idle()
    assert control.deliveries() == []
    assert control.status()["rules"] == {"duplicates": [], "delays": [], "holds": []}
    assert target.requests(session) == []  # the held delivery was dropped, never sent


def test_bad_control_calls_are_refused(dispatcher: Running) -> None:
    with pytest.raises(DispatcherError) as refused:
        dispatcher.control.duplicate("x", copies=0)
    assert refused.value.status == 400
    with pytest.raises(DispatcherError) as unknown:
        dispatcher.control._call("POST", "/nope", {})
    assert unknown.value.status == 404


def test_backoff_follows_cloud_tasks_doublings_then_linear() -> None:
    policy = Policy(min_backoff=10, max_backoff=300, max_doublings=3)
    assert [policy.backoff(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 240, 300, 300]


# -- the whole stack ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parallel"), [(None, False), ("", False), ("serial", False), ("parallel", True), (" Parallel ", True)]
)
def test_tasks_delivery_chooses_the_mode_of_make_dev(
    monkeypatch: pytest.MonkeyPatch, value: str | None, parallel: bool
) -> None:
    if value is None:
        monkeypatch.delenv(local.TASKS_DELIVERY, raising=False)
    else:
        monkeypatch.setenv(local.TASKS_DELIVERY, value)
    assert local.parallel_tasks_from_env() is parallel


def test_an_unknown_tasks_delivery_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local.TASKS_DELIVERY, "fast")
    with pytest.raises(StackError, match="TASKS_DELIVERY must be 'serial' or 'parallel'"):
        local.parallel_tasks_from_env()


@pytest.mark.stack
def test_a_mention_ends_done_through_the_dispatcher(
    stack: local.Stack, slack: SlackSender, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The suite's stack runs with parallel_tasks: the emulator hands every task to the dispatcher, which runs
    agent_session; the mention's task, delivered twice at once, still ends in one done session and one reply."""
    from shared.state import ids
    from shared.state.models import SessionStatus
    from tests.agent_helpers import wait_status

    info = json.loads(stack.stack_file.read_text())
    assert info["dispatch"] == stack.url("dispatch")
    assert "dispatch" in info["pids"]
    assert stack.product_env()["TASKS_TARGET_URL"] == stack.url("dispatch") + "/"
    dispatch = Dispatcher(stack.url("dispatch"))
    assert dispatch.health()["target"] == stack.function_url("agent_session")
    event_id, channel = f"Ev{uid}", f"C{uid}"
    session_id = ids.session_for_event(event_id)  # the test picks the event's id, so the rule matches its task only
    fake_gemini.script(FakeGemini.matching(uid, FakeGemini.text("Hello from a parallel stack.")))
    dispatch.duplicate(session_id, copies=2, tasks=1)  # the mention's task goes out twice at once

    sent = slack.send_event(mention(channel=channel, ts="1700000000.000100", text=f"say hello [{uid}]"),
                            event_id=event_id)  # fmt: skip
    assert sent.status_code == 200
    done = wait_status(session_id, SessionStatus.DONE, timeout=60)
    assert done.limits.turns == 1

    def answered() -> list[dict[str, Any]] | None:
        found = dispatch.deliveries(session_id)
        return found if len(found) >= 2 and all(a["status"] is not None for a in found) else None

    attempts = wait_for(answered, timeout=30, what="both copies of the mention's task to be answered")
    assert len(attempts) == 2
    assert {a["task"] for a in attempts} == {ids.task_id(session_id)}
    assert {a["queue"] for a in attempts} == {local.QUEUE.rsplit("/", 1)[-1]}
    assert {a["source"] for a in attempts} == {"tasks"}
    assert sorted(a["duplicate"] for a in attempts) == [False, True]
    assert all(a["status"] == 200 for a in attempts)
    [reply] = fake_slack.calls("chat.postMessage", channel=channel)
    assert reply["args"]["text"] == "Hello from a parallel stack."
    # the second delivery found the session claimed and did nothing
    assert len([r for r in fake_gemini.requests() if uid in json.dumps(r["body"])]) == 1

"""The HTTP face of the dispatcher: tasks in at ``POST /``, the control API beside it.

``POST /`` is where the Cloud Tasks emulator dispatches a task (the product's ``TASKS_TARGET_URL`` points
here): it is answered 200 at once and the task is delivered to the target by ``Deliveries``. The task name is
the emulator's ``X-CloudTasks-TaskName`` (short form), the queue the last part of its ``X-CloudTasks-QueueName``,
the schedule time its ``X-CloudTasks-TaskETA``; the task's own headers (Content-Type, traceparent) and body are
passed on untouched.

Control (JSON), for tests through ``infra.fakes.dispatch.client.Dispatcher``:

- ``GET /deliveries[?match=S]``: every attempt, oldest first;
- ``GET /idle``: whether any delivery is in flight or pending (held, delayed, backing off), and which are held;
- ``GET /health``: the target and the policy;
- ``POST /reset``: forget the log and the rules, drop deliveries not yet in flight;
- ``POST /duplicate {match, copies, tasks, stagger}``: the next ``tasks`` matching tasks are each delivered
  ``copies`` times at once;
- ``POST /hold {match}`` / ``POST /release {match?}``: keep matching deliveries back until released;
- ``POST /delay {match, seconds, tasks}``: matching tasks go out ``seconds`` late, the others meanwhile;
- ``POST /deliver {task, body | session_id, headers, copies, queue, wait, timeout}``: an extra delivery now.

Rules match a substring of the session id in the task's body (of the task name if the body names none).
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from infra.fakes.serve import BROWSER_REFUSED, JsonLogServer, from_a_browser, read_body

from .state import Deliveries, Json, Policy, Task, session_id_of, task_headers


class BadControlRequest(ValueError):
    """A control request the dispatcher refuses: 400 with the message."""


class DispatchServer(JsonLogServer):
    """A threaded server whose handlers share one ``Deliveries``."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        target: str,
        policy: Policy,
        queue: str = "default",
        log_stream: IO[str] | None = None,
    ) -> None:
        self.queue = queue
        self.deliveries = Deliveries(target, policy, log=self.log_json)
        self._names = 0
        super().__init__(address, _Handler, log_stream)

    def server_close(self) -> None:
        self.deliveries.close()
        super().server_close()

    def task_from(self, body: bytes, headers: list[tuple[str, str]]) -> Task:
        """The task an emulator's dispatch carries."""
        lower = {name.lower(): value for name, value in headers}
        session_id = session_id_of(body)
        name = (lower.get("x-cloudtasks-taskname") or "").rsplit("/", 1)[-1]
        if not name:
            name = session_id or self._unnamed()
        queue = (lower.get("x-cloudtasks-queuename") or self.queue).rsplit("/", 1)[-1]
        return Task(
            name=name,
            queue=queue,
            body=body,
            headers=tuple(task_headers(headers)),
            eta=_eta(lower.get("x-cloudtasks-tasketa")),
            session_id=session_id,
            source="tasks",
        )

    def _unnamed(self) -> str:
        with self._log_lock:
            self._names += 1
            return f"task-{self._names}"

    # -- control ---------------------------------------------------------------------------

    def control(self, path: str, args: Json) -> Json | None:
        """Run one POST control call; None for an unknown path, BadControlRequest for a bad request."""
        deliveries = self.deliveries
        try:
            if path == "/reset":
                deliveries.reset()
                return {"ok": True}
            if path == "/duplicate":
                return deliveries.duplicate(
                    _text(args, "match"),
                    copies=_int(args, "copies", 2),
                    tasks=_optional_int(args, "tasks", 1),
                    stagger=_number(args, "stagger", 0.0),
                )
            if path == "/hold":
                return deliveries.hold(_text(args, "match"))
            if path == "/release":
                match = args.get("match")
                if match is not None and not isinstance(match, str):
                    raise BadControlRequest("match must be a string")
                return deliveries.release(match)
            if path == "/delay":
                seconds = _number(args, "seconds", 1.0)
                return deliveries.delay(_text(args, "match"), seconds=seconds, tasks=_optional_int(args, "tasks", None))
            if path == "/deliver":
                return self._deliver(args)
        except ValueError as exc:
            raise BadControlRequest(str(exc)) from exc
        return None

    def _deliver(self, args: Json) -> Json:
        raw = args.get("body")
        given_headers = args.get("headers") or {}
        if not isinstance(given_headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in given_headers.items()
        ):
            raise BadControlRequest("headers must be an object of strings")
        headers = dict(given_headers)
        if raw is None:
            session = args.get("session_id")
            if not isinstance(session, str) or not session:
                raise BadControlRequest("give a body, or a session_id to send as {'session_id': ...}")
            raw = {"session_id": session}
        if isinstance(raw, str):
            body = raw.encode()
        else:
            body = json.dumps(raw).encode()
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        session_id = session_id_of(body)
        name = args.get("task") or session_id or self._unnamed()
        queue = args.get("queue") or self.queue
        if not isinstance(name, str) or not isinstance(queue, str):
            raise BadControlRequest("task and queue must be strings")
        task = Task(
            name=name.rsplit("/", 1)[-1],
            queue=queue.rsplit("/", 1)[-1],
            body=body,
            headers=tuple(task_headers(list(headers.items()))),
            eta=time.time(),
            session_id=session_id,
            source="deliver",
        )
        ids = self.deliveries.accept(task, copies=_int(args, "copies", 1))
        answer: Json = {"deliveries": ids, "task": task.name}
        if args.get("wait"):
            finished = self.deliveries.wait(ids, timeout=_number(args, "timeout", 60.0))
            attempts = [a for a in self.deliveries.attempts() if a["delivery"] in ids]
            answer.update(finished=finished, attempts=attempts)
        return answer


class _Handler(BaseHTTPRequestHandler):
    server: DispatchServer
    server_version = "dispatch/1"

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        deliveries = self.server.deliveries
        if split.path == "/deliveries":
            match = parse_qs(split.query).get("match", [None])[0]
            self._reply(200, {"deliveries": deliveries.attempts(match)})
        elif split.path == "/idle":
            self._reply(200, deliveries.status())
        elif split.path == "/health":
            self._reply(200, {"ok": True, "target": deliveries.target, "policy": deliveries.policy.public()})
        else:
            self._reply(404, {"error": f"dispatch: no route for GET {split.path}"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if from_a_browser(self):  # its body is never read: the connection ends with the answer
            self.close_connection = True
            self._reply(403, {"error": f"dispatch: {BROWSER_REFUSED}"})
            return
        try:
            body = read_body(self)
        except ValueError as exc:
            self._reply(413, {"error": str(exc)})
            return
        if path == "/":
            task = self.server.task_from(body, list(self.headers.items()))
            try:
                ids = self.server.deliveries.accept(task)
            except RuntimeError as exc:  # shutting down: let the emulator retry elsewhere
                self._reply(503, {"error": str(exc)})
                return
            self._reply(200, {"accepted": ids, "task": task.name})
            return
        try:
            args = json.loads(body or b"{}")
            if not isinstance(args, dict):
                raise BadControlRequest("expected a JSON object")
            answer = self.server.control(path, args)
        except ValueError as exc:  # BadControlRequest, or a body that is not JSON
            self._reply(400, {"error": str(exc)})
            return
        if answer is None:
            self._reply(404, {"error": f"dispatch: no route for POST {path}"})
        else:
            self._reply(200, answer)

    def _reply(self, status: int, body: Json) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silenced: attempts are logged by ``Deliveries``, one JSON line each."""

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log_json({"message": format % args})


def _eta(value: str | None) -> float:
    """The emulator's ETA when it sent a usable one, else now."""
    try:
        eta = float(value or 0)
    except ValueError:
        return time.time()
    return eta if eta > 0 else time.time()


def _text(args: Json, key: str) -> str:
    value = args.get(key, "")
    if not isinstance(value, str):
        raise BadControlRequest(f"{key} must be a string")
    return value


def _int(args: Json, key: str, default: int) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadControlRequest(f"{key} must be an integer")
    return value


def _optional_int(args: Json, key: str, default: int | None) -> int | None:
    if args.get(key, default) is None:
        return None
    return _int(args, key, default or 0)


def _number(args: Json, key: str, default: float) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadControlRequest(f"{key} must be a number")
    return float(value)

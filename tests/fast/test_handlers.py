"""The four entry points through functions-framework's test client, in this process, on the real Firestore emulator.

The fast tier (`make test-fast`): no function processes, no Gemini; the Cloud Tasks client is a recorder handed in
through ``shared.deps``, and Slack is the fake Slack server.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any
from urllib.parse import urlencode

from google.api_core.exceptions import ServiceUnavailable

from infra.fakes.slack.client import FakeSlack
from infra.signing import signed_headers
from infra.slack_payloads import event_callback, mention
from infra.stack import SIGNING_SECRET, Stack
from shared import deps
from shared.state import firestore, ids, sessions
from tests.fast.conftest import RecordingTasks
from tests.function_apps import function_client as client


def signed(body: bytes, content_type: str = "application/json") -> dict[str, str]:
    return signed_headers(SIGNING_SECRET, body, content_type=content_type)


def test_url_verification_and_a_bad_signature(tasks: RecordingTasks) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "abc"}).encode()
    reply = client("slack_events").post("/", data=body, headers=signed(body))
    assert (reply.status_code, reply.get_json()) == (200, {"challenge": "abc"})
    forged = client("slack_events").post("/", data=body, headers={**signed(body), "X-Slack-Signature": "v0=00"})
    assert forged.status_code == 401
    assert tasks.created == []


def test_a_mention_creates_its_session_and_one_task_however_often_it_arrives(tasks: RecordingTasks) -> None:
    uid = uuid.uuid4().hex[:10].upper()
    event_id = f"Ev{uid}"
    body = json.dumps(event_callback(mention(channel=f"C{uid}", ts="1700000000.000100"), event_id=event_id)).encode()
    first = client("slack_events").post("/", data=body, headers=signed(body))
    again = client("slack_events").post("/", data=body, headers={**signed(body), "X-Slack-Retry-Num": "1"})
    assert first.status_code == again.status_code == 200
    assert first.get_json()["session_id"] == ids.session_for_event(event_id)
    assert again.get_json()["duplicate"] is True
    stored = sessions.get_session(ids.session_for_event(event_id))
    assert stored is not None
    assert stored.status == "queued"
    assert [json.loads(t.http_request.body)["session_id"] for t in tasks.created][:1] == [stored.session_id]


def test_a_press_on_no_question_is_refused_with_an_ephemeral(emulators: Stack, tasks: RecordingTasks) -> None:
    fake_slack = FakeSlack(emulators.url("fake_slack"))
    fake_slack.reset()
    uid = uuid.uuid4().hex[:10].upper()
    payload = {
        "type": "block_actions",
        "user": {"id": "U0NOBODY"},
        "channel": {"id": f"C{uid}"},
        "container": {"channel_id": f"C{uid}", "message_ts": "1.1"},
        "actions": [{"action_id": "answer_1", "value": "q-none|1", "action_ts": "2.2"}],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    reply = client("slack_interactivity").post(
        "/", data=body, headers=signed(body, content_type="application/x-www-form-urlencoded")
    )
    assert (reply.status_code, reply.get_json()["answer"]) == (200, "no_question")
    assert [e["text"] for e in fake_slack.ephemerals(f"C{uid}")] == [
        "That button does not belong to an open question here; nothing changed."
    ]
    malformed = client("slack_interactivity").post(
        "/", data=b"payload=%7B", headers=signed(b"payload=%7B", content_type="application/x-www-form-urlencoded")
    )
    assert malformed.status_code == 400


def test_agent_session_answers_2xx_to_what_it_cannot_run(tasks: RecordingTasks) -> None:
    headers = {"X-CloudTasks-TaskName": "t1", "X-CloudTasks-TaskRetryCount": "0"}
    missing = client("agent_session").post("/", json={"session_id": "no-such-session"}, headers=headers)
    assert (missing.status_code, missing.get_json()) == (200, {"ok": True, "skipped": "no such session"})
    malformed = client("agent_session").post("/", data=b"{}", headers=headers)
    assert (malformed.status_code, malformed.get_json()) == (200, {"error": "body.session_id is missing"})
    assert client("agent_session").get("/").status_code == 405


def test_the_sweep_runs_and_refuses_a_clock_without_a_zone(tasks: RecordingTasks) -> None:
    reply = client("sweep").post("/", json={"now": "2001-01-01T00:00:00+00:00"})
    assert reply.status_code == 200
    assert set(reply.get_json()) >= {"reminded", "abandoned", "requeued", "questions_read"}
    assert client("sweep").post("/", json={"now": "2001-01-01T00:00:00"}).status_code == 400
    assert firestore.now().tzinfo is not None


class FirstCallSlowAndFailing(RecordingTasks):
    """Cloud Tasks having a bad moment: the first create blocks until released, then fails; later ones work."""

    def __init__(self) -> None:
        super().__init__()
        self.first = threading.Event()
        self.release = threading.Event()

    def create_task(self, *, parent: str, task: Any, retry: Any = None, timeout: float | None = None) -> Any:
        if not self.first.is_set():
            self.first.set()
            self.release.wait(10)
            raise ServiceUnavailable("Cloud Tasks is down")  # type: ignore[no-untyped-call]
        return super().create_task(parent=parent, task=task)


def test_a_mention_whose_slow_enqueue_fails_is_never_lost(emulators: Stack) -> None:
    """Defect: the ingress undid the mention after Slack's retry had already been told "duplicate"."""
    uid = uuid.uuid4().hex[:10].upper()
    event_id = f"Ev{uid}"
    body = json.dumps(event_callback(mention(channel=f"C{uid}", ts="1700000000.000100"), event_id=event_id)).encode()
    flaky = FirstCallSlowAndFailing()
    replies: list[Any] = []
    with deps.override(tasks=flaky):

        def deliver() -> None:
            replies.append(client("slack_events").post("/", data=body, headers=signed(body)))

        first = threading.Thread(target=deliver)
        first.start()
        assert flaky.first.wait(10)
        # Slack gave up waiting (3 s) and retries while the first delivery is still enqueuing.
        retry = client("slack_events").post("/", data=body, headers={**signed(body), "X-Slack-Retry-Num": "1"})
        flaky.release.set()
        first.join(10)
    assert retry.get_json() == {"ok": True, "duplicate": True}
    assert replies[0].status_code == 503  # Slack is asked to retry; nothing was undone
    stored = sessions.get_session(ids.session_for_event(event_id))
    assert stored is not None
    assert stored.status == "queued"
    assert [json.loads(t.http_request.body)["session_id"] for t in flaky.created] == [stored.session_id]

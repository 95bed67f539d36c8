"""The slack_events function over HTTP, on the emulators: verification, de-duplication, enqueue, bad input."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.state import firestore, ids
from tests.conftest import TEST_DIR
from tests.poll import wait_for
from tests.slack import SlackSender, event_callback, mention, message

pytestmark = pytest.mark.stack


def session_doc(event_id: str) -> dict[str, Any] | None:
    snap = firestore.db().collection(firestore.SESSIONS).document(ids.session_for_event(event_id)).get()
    return snap.to_dict() if snap.exists else None


def event_doc_exists(event_id: str) -> bool:
    return bool(firestore.db().collection(firestore.EVENTS).document(event_id).get().exists)


LOGS = TEST_DIR / "logs"


@pytest.fixture(autouse=True)
def quick_agent(script: Callable[..., int], uid: str) -> Iterator[None]:
    """Sessions these tests start get an immediate answer, and are finished before the next test."""
    script(FakeGemini.text("ok"), FakeGemini.text("ok"))
    yield

    def settled() -> bool:
        query = (
            firestore.db()
            .collection(firestore.SESSIONS)
            .where(filter=FieldFilter("channel", "in", [f"C{uid}", f"D{uid}"]))
        )
        return all((s.to_dict() or {}).get("status") not in {"queued", "running"} for s in query.stream())

    wait_for(settled, timeout=30, what="this test's sessions to finish")


def assert_nothing_created(event_id: str) -> None:
    assert not event_doc_exists(event_id)
    assert session_doc(event_id) is None


def test_mention_creates_one_session_and_one_task(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    response = slack.send_event(
        mention(channel=f"C{uid}", ts="1700000000.000100", text="what's up?"), event_id=event_id
    )
    assert response.status_code == 200, response.text
    assert response.json()["session_id"] == ids.session_for_event(event_id)

    doc = session_doc(event_id)
    assert doc is not None
    assert doc["kind"] == "mention"
    assert doc["status"] == "queued"
    assert doc["channel"] == f"C{uid}"
    assert doc["thread_ts"] == "1700000000.000100"
    assert doc["trigger_user"] == "U0HUMAN"
    assert event_doc_exists(event_id)
    assert (
        firestore.db().collection(firestore.EVENTS).document(event_id).get().get(firestore.EVENT_EXPIRES_FIELD)
        > doc["created_at"]
    )
    # The task reached agent_session: the session left ``queued`` (its claim is the evidence, not a log line).
    wait_for(lambda: (session_doc(event_id) or {}).get("status") != "queued", what="the task to reach agent_session")


def test_mention_in_a_thread_keeps_the_thread(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    event = mention(channel=f"C{uid}", ts="1700000005.000200", thread_ts="1700000000.000100")
    assert slack.send_event(event, event_id=event_id).status_code == 200
    doc = session_doc(event_id)
    assert doc is not None
    assert (doc["thread_ts"], doc["trigger_ts"]) == ("1700000000.000100", "1700000005.000200")


def test_direct_message_starts_a_session(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    event = message(channel=f"D{uid}", ts="1700000000.000300", channel_type="im", text="help me")
    assert slack.send_event(event, event_id=event_id).status_code == 200
    doc = session_doc(event_id)
    assert doc is not None
    assert doc["text"] == "help me"


def assert_ran_once(fake_slack: FakeSlack, event_id: str, channel: str) -> None:
    """The session ran exactly once, however many deliveries its task got.

    A repeat of a message whose session is still queued creates its task again (production Cloud Tasks refuses
    the same name; the emulator accepts it), so the evidence is what the session did: one answer posted.
    """
    wait_for(lambda: (session_doc(event_id) or {}).get("status") == "done", what="the session to finish")
    time.sleep(1.5)  # the emulator dispatches every 0.1 s: any further delivery has arrived by now
    assert len(fake_slack.calls("chat.postMessage", channel=channel)) == 1


def test_three_concurrent_deliveries_make_one_session_and_one_task(
    slack: SlackSender, fake_slack: FakeSlack, uid: str
) -> None:
    event_id = f"Ev{uid}"
    body = json.dumps(event_callback(mention(channel=f"C{uid}", ts="1700000000.000400"), event_id=event_id)).encode()
    barrier = threading.Barrier(3)
    results: list[requests.Response] = []
    lock = threading.Lock()

    def deliver(retry: int) -> None:
        barrier.wait()
        extra = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else {}
        response = slack.post_signed(body, extra_headers=extra)
        with lock:
            results.append(response)

    threads = [threading.Thread(target=deliver, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(r.status_code for r in results) == [200, 200, 200]
    assert sum(1 for r in results if r.json().get("session_id")) == 1
    assert sum(1 for r in results if r.json().get("duplicate")) == 2
    sessions = list(
        firestore.db().collection(firestore.SESSIONS).where(filter=FieldFilter("event_id", "==", event_id)).stream()
    )
    assert len(sessions) == 1
    assert_ran_once(fake_slack, event_id, f"C{uid}")


def test_slack_retry_creates_no_second_session(slack: SlackSender, fake_slack: FakeSlack, uid: str) -> None:
    event_id = f"Ev{uid}"
    event = mention(channel=f"C{uid}", ts="1700000000.000500")
    assert slack.send_event(event, event_id=event_id).status_code == 200
    retry = slack.send_event(
        event, event_id=event_id, extra_headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    )
    assert retry.status_code == 200
    assert retry.json() == {"ok": True, "duplicate": True}
    assert_ran_once(fake_slack, event_id, f"C{uid}")


def test_url_verification_is_answered(slack: SlackSender) -> None:
    body = json.dumps(
        {"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}
    ).encode()
    response = slack.post_signed(body)
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


def _mention_body(uid: str) -> tuple[str, bytes]:
    event_id = f"Ev{uid}"
    return event_id, json.dumps(
        event_callback(mention(channel=f"C{uid}", ts="1700000000.000600"), event_id=event_id)
    ).encode()


def test_wrong_signature_is_401(slack: SlackSender, uid: str) -> None:
    event_id, body = _mention_body(uid)
    headers = SlackSender(events_url=slack.events_url, secret="not-the-secret").post_signed
    assert headers(body).status_code == 401
    assert_nothing_created(event_id)


def test_tampered_body_is_401(slack: SlackSender, uid: str) -> None:
    event_id, body = _mention_body(uid)
    from infra.signing import signed_headers

    headers = signed_headers(local.SIGNING_SECRET, body)
    assert slack.post_raw(body.replace(b"hello", b"HELLO"), headers).status_code == 401
    assert_nothing_created(event_id)


@pytest.mark.parametrize("age", [310, -310, 3600])
def test_stale_or_future_timestamp_is_401(slack: SlackSender, uid: str, age: int) -> None:
    event_id, body = _mention_body(uid)
    assert slack.post_signed(body, timestamp=int(time.time()) - age).status_code == 401
    assert_nothing_created(event_id)


@pytest.mark.parametrize("drop", ["X-Slack-Signature", "X-Slack-Request-Timestamp", "both"])
def test_missing_headers_is_401(slack: SlackSender, uid: str, drop: str) -> None:
    event_id, body = _mention_body(uid)
    from infra.signing import signed_headers

    headers = signed_headers(local.SIGNING_SECRET, body)
    for name in ("X-Slack-Signature", "X-Slack-Request-Timestamp") if drop == "both" else (drop,):
        del headers[name]
    assert slack.post_raw(body, headers).status_code == 401
    assert_nothing_created(event_id)


def test_non_numeric_timestamp_is_401(slack: SlackSender, uid: str) -> None:
    event_id, body = _mention_body(uid)
    from infra.signing import signed_headers

    headers = signed_headers(local.SIGNING_SECRET, body)
    headers["X-Slack-Request-Timestamp"] = "yesterday"
    assert slack.post_raw(body, headers).status_code == 401
    assert_nothing_created(event_id)


@pytest.mark.parametrize(
    ("name", "event"),
    [
        ("bot message", {"bot_id": "B999", "subtype": "bot_message"}),
        ("another bot's mention", {"bot_id": "B999"}),
        ("own message by user id", {"user": local.BOT_USER_ID}),
        ("own message by app id", {"app_id": local.APP_ID, "bot_id": "B0001"}),
        ("edit", {"subtype": "message_changed"}),
        ("delete", {"subtype": "message_deleted"}),
    ],
)
def test_bot_own_and_edited_messages_do_nothing(slack: SlackSender, uid: str, name: str, event: dict[str, Any]) -> None:
    event_id = f"Ev{uid}"
    base = message(channel=f"D{uid}", ts="1700000000.000700", channel_type="im", text="loop?")
    response = slack.send_event({**base, **event}, event_id=event_id)
    assert response.status_code == 200, name
    assert "ignored" in response.json(), name
    assert_nothing_created(event_id)


def test_an_edited_mention_does_nothing(slack: SlackSender, uid: str) -> None:
    """Editing a message that mentions the bot makes Slack send its app_mention again, with ``edited``: the edit of
    a mention whose records have expired (or one edited to add the mention) is not a new request."""
    event_id = f"Ev{uid}"
    event = mention(channel=f"C{uid}", ts="1700000000.000750", text="deploy it, I mean staging")
    edited = {**event, "edited": {"user": "U0HUMAN", "ts": "1700000100.000000"}}
    response = slack.send_event(edited, event_id=event_id)
    assert response.status_code == 200
    assert response.json()["ignored"] == "edited message"
    assert_nothing_created(event_id)


def test_own_mention_does_nothing(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    event = mention(channel=f"C{uid}", ts="1700000000.000800", user=local.BOT_USER_ID)
    assert "ignored" in slack.send_event(event, event_id=event_id).json()
    assert_nothing_created(event_id)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json at all", "body is not JSON"),
        (b"[1, 2, 3]", "body is not a JSON object"),
        (b'"a string"', "body is not a JSON object"),
        (b'{"type": "event_callback", "event": {"type": "app_mention"}}', "body.event_id is missing"),
        (b'{"type": "event_callback", "event_id": "EvX1"}', "body.event is missing"),
        (b'{"type": "event_callback", "event_id": "EvX2", "event": {"text": "x"}}', "event.type is missing"),
        (
            b'{"type": "event_callback", "event_id": "EvX3", "event": {"type": "app_mention", "ts": "1.2",'
            b' "user": "U1"}}',
            "event.channel is missing",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX4", "event": {"type": "app_mention", "channel": "C1",'
            b' "user": "U1"}}',
            "event.ts is missing",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX5", "event": {"type": "app_mention", "channel": "C1",'
            b' "ts": "1.2", "user": "U1", "text": 7}}',
            "event.text is not a string",
        ),
        (b'{"type": "url_verification"}', "body.challenge is missing"),
        (
            b'{"type": "event_callback", "event_id": "EvX1", "event": {"type": "message", "subtype": ["x"],'
            b' "channel": "C1", "ts": "1.2", "user": "U1"}}',
            "event.subtype is not a string",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX2", "event": {"type": "app_mention", "channel": "C1",'
            b' "ts": "1.2", "user": ["U1"]}}',
            "event.user is missing",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX3", "authorizations": 5, "event": {"type": "app_mention",'
            b' "channel": "C1", "ts": "1.2", "user": "U1"}}',
            "body.authorizations is not a list",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX4", "event": {"type": "app_mention", "channel": "C1/x",'
            b' "ts": "1.2", "user": "U1"}}',
            "event.channel is not a Slack id",
        ),
        (
            b'{"type": "event_callback", "event_id": "EvX5", "event": {"type": "app_mention", "channel": "C1",'
            b' "ts": "1.2/3", "user": "U1"}}',
            "event.ts is not a Slack id",
        ),
        (
            b'{"type": "event_callback", "event_id": "Ev/X6", "event": {"type": "app_mention", "channel": "C1",'
            b' "ts": "1.2", "user": "U1"}}',
            "body.event_id is not a Slack id",
        ),
    ],
)
def test_malformed_bodies_are_400_and_change_nothing(slack: SlackSender, body: bytes, reason: str) -> None:
    response = slack.post_signed(body)
    assert response.status_code == 400
    assert response.json() == {"error": reason}
    for event_id in ("EvX1", "EvX2", "EvX3", "EvX4", "EvX5"):
        assert_nothing_created(event_id)


def test_unknown_event_types_are_200_and_ignored(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    response = slack.send_event({"type": "reaction_added", "user": "U1", "reaction": "eyes"}, event_id=event_id)
    assert response.status_code == 200
    assert response.json()["ignored"] == "event type 'reaction_added'"
    other = slack.post_signed(json.dumps({"type": "app_rate_limited", "minute_rate_limited": 1}).encode())
    assert other.status_code == 200
    assert_nothing_created(event_id)


def test_oversized_body_is_413(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    event = mention(channel=f"C{uid}", ts="1700000000.000900", text="x" * (1024 * 1024))
    response = slack.send_event(event, event_id=event_id)
    assert response.status_code == 413
    assert_nothing_created(event_id)


def test_get_is_405(slack: SlackSender) -> None:
    assert requests.get(slack.events_url, timeout=5).status_code == 405


def test_ingress_logs_are_json_lines_with_severity_and_session(slack: SlackSender, uid: str) -> None:
    event_id = f"Ev{uid}"
    assert slack.send_event(mention(channel=f"C{uid}", ts="1700000001.000100"), event_id=event_id).ok
    session_id = ids.session_for_event(event_id)
    log_file = LOGS / "slack_events.log"

    def queued_line() -> dict[str, Any] | None:
        for line in log_file.read_text().splitlines():
            if session_id in line and line.startswith("{"):
                entry = json.loads(line)
                if entry.get("message") == "session queued":
                    return dict(entry)
        return None

    entry = wait_for(queued_line, what="the 'session queued' log line")
    assert entry["severity"] == "INFO"
    assert entry["session_id"] == session_id
    assert entry["event_id"] == event_id

"""The fake Slack over real HTTP: slack-sdk's own WebClient against it, signed events out of it.

The server runs as a subprocess (``python -m infra.fakes.slack``), exactly as the
local stack runs it, on a port it picks itself; each test wipes it first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.client import IncompleteRead, RemoteDisconnected
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.signature import SignatureVerifier

from infra.chat import ChatSession, extract_buttons, format_message, format_reactions, parse_command
from infra.fakes.slack import FakeSlack, FakeSlackConfig, FakeSlackError, running
from infra.procs import spawn_ready

ROOT = Path(__file__).resolve().parents[2]
TOKEN, SECRET, BOT, TEAM, APP = "xoxb-test", "test-signing-secret", "UBOT", "T0001", "A0001"
HUMAN = "U0HUMAN"


def button(action_id: str, value: str, label: str, **extra: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "value": value,
        **extra,
        "text": {"type": "plain_text", "text": label},
    }


QUESTION = {"type": "section", "block_id": "q", "text": {"type": "mrkdwn", "text": "sqlite or postgres?"}}
CHOICES = [button("answer_0", "sqlite", "SQLite"), button("answer_1", "postgres", "Postgres", style="primary")]
BUTTONS: list[dict[str, Any]] = [QUESTION, {"type": "actions", "block_id": "choices", "elements": CHOICES}]
ENVELOPE_KEYS = "token team_id api_app_id event type event_id event_time authorizations is_ext_shared_channel"
ENVELOPE_KEYS += " event_context"
ARGV = f"--host 127.0.0.1 --port 0 --bot-token {TOKEN} --signing-secret {SECRET} --bot-user-id {BOT}"
ARGV += f" --team-id {TEAM} --app-id {APP}"


def start_fakeslack(log_path: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the server in its own session and wait for its ready line, which names the port."""
    argv = [sys.executable, "-m", "infra.fakes.slack", *ARGV.split()]
    proc, url = spawn_ready(argv, log_path=log_path, prefix="fakeslack listening on ", cwd=ROOT)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), f"unexpected ready line; see {log_path}"
    return proc, url


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    """Stop our own server by its process group, never by name."""
    try:
        os.killpg(proc.pid, sig)
        return proc.wait(timeout=60)
    except ProcessLookupError:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_fakeslack(tmp_path_factory.mktemp("fakeslack") / "fakeslack.log")
    yield url
    stop(proc)


@pytest.fixture
def fake(server_url: str) -> FakeSlack:
    client = FakeSlack(server_url)
    client.reset()
    return client


@pytest.fixture
def web(server_url: str) -> WebClient:
    return WebClient(token=TOKEN, base_url=f"{server_url}/api/")


class Receiver:
    """A tiny app stand-in that records every signed request the fake sends it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.requests) >= count, f"expected {count} deliveries, got {self.requests}"
        return self.requests


@pytest.fixture
def receiver(fake: FakeSlack) -> Iterator[Receiver]:
    app = Receiver()
    app.thread.start()
    fake.configure(events_url=f"{app.url}/slack/events", interactivity_url=f"{app.url}/slack/actions")
    yield app
    app.server.shutdown()
    app.server.server_close()


def verified(request: dict[str, Any]) -> bytes:
    """The body, after slack-sdk's verifier has accepted its signature."""
    assert SignatureVerifier(SECRET).is_valid_request(request["body"], request["headers"])
    assert not SignatureVerifier("another-secret").is_valid_request(request["body"], request["headers"])
    body: bytes = request["body"]
    return body


# -- the Web API through slack-sdk ---------------------------------------------------------


def test_auth_test_names_the_bot(fake: FakeSlack, web: WebClient) -> None:
    auth = web.auth_test()
    assert (auth["user_id"], auth["team_id"], auth["bot_id"]) == (BOT, TEAM, "B0001")
    assert auth["is_enterprise_install"] is False
    fake.assert_calls("auth.test", 1)


def test_wrong_token_is_invalid_auth(fake: FakeSlack, server_url: str) -> None:
    with pytest.raises(SlackApiError) as raised:
        WebClient(token="xoxb-wrong", base_url=f"{server_url}/api/").chat_postMessage(channel="C1", text="hi")
    assert raised.value.response.status_code == 200
    assert raised.value.response["error"] == "invalid_auth"
    assert fake.messages("C1") == []
    assert "token" not in fake.calls("chat.postMessage")[0]["args"]


def test_unknown_method(fake: FakeSlack, web: WebClient) -> None:
    with pytest.raises(SlackApiError, match="unknown_method"):
        web.api_call("chat.fly")


def test_post_in_thread_then_update(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C1", f"<@{BOT}> hello")
    reply = web.chat_postMessage(channel="C1", text="on it", thread_ts=root["ts"])
    assert reply["channel"] == "C1"
    assert reply["message"]["thread_ts"] == root["ts"]
    assert (reply["message"]["bot_id"], reply["message"]["app_id"], reply["message"]["user"]) == ("B0001", APP, BOT)
    assert float(reply["ts"]) > float(root["ts"])
    assert re.fullmatch(r"\d{10}\.\d{6}", reply["ts"])

    updated = web.chat_update(channel="C1", ts=reply["ts"], text="done", blocks=BUTTONS)
    assert updated["message"]["text"] == "done"
    assert updated["message"]["edited"]["user"] == BOT
    [stored] = fake.bot_replies("C1", root["ts"])
    assert (stored["text"], stored["blocks"]) == ("done", BUTTONS)
    parent = fake.messages("C1", root["ts"])[0]
    assert (parent["reply_count"], parent["latest_reply"]) == (1, reply["ts"])

    with pytest.raises(SlackApiError, match="message_not_found"):
        web.chat_update(channel="C1", ts="1.000001", text="x")
    with pytest.raises(SlackApiError, match="cant_update_message"):
        web.chat_update(channel="C1", ts=root["ts"], text="not mine")
    fake.assert_calls("chat.postMessage", 1, channel="C1", thread_ts=root["ts"])


def test_blocks_as_json_string_and_required_text(fake: FakeSlack, web: WebClient) -> None:
    posted = web.chat_postMessage(channel="C2", blocks=json.dumps(BUTTONS), text="fallback")
    assert posted["message"]["blocks"] == BUTTONS
    form = web.api_call("chat.postMessage", params={"channel": "C2", "blocks": json.dumps(BUTTONS[:1])})
    assert form["message"]["blocks"] == BUTTONS[:1]
    with pytest.warns(UserWarning, match="`text` argument is missing"), pytest.raises(SlackApiError, match="no_text"):
        web.chat_postMessage(channel="C2")
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        web.chat_postMessage(channel="C2", text="x", blocks="[not json")


def test_post_ephemeral(fake: FakeSlack, web: WebClient) -> None:
    answer = web.chat_postEphemeral(channel="C3", user=HUMAN, text="only you", thread_ts="1.000001")
    [ephemeral] = fake.ephemerals(channel="C3", user=HUMAN)
    assert ephemeral.items() >= {"ts": answer["message_ts"], "text": "only you", "thread_ts": "1.000001"}.items()
    assert fake.messages("C3") == []


def test_reactions_add_remove(fake: FakeSlack, web: WebClient) -> None:
    ts = fake.user_message(HUMAN, "C4", "hi")["ts"]
    web.reactions_add(channel="C4", timestamp=ts, name="eyes")
    web.reactions_add(channel="C4", timestamp=ts, name=":speech_balloon:")
    assert fake.reactions("C4", ts) == ["eyes", "speech_balloon"]
    assert fake.messages("C4")[0]["reactions"][0] == {"name": "eyes", "users": [BOT], "count": 1}
    with pytest.raises(SlackApiError, match="already_reacted"):
        web.reactions_add(channel="C4", timestamp=ts, name="eyes")
    web.reactions_remove(channel="C4", timestamp=ts, name="eyes")
    assert fake.reactions("C4", ts) == ["speech_balloon"]
    with pytest.raises(SlackApiError, match="no_reaction"):
        web.reactions_remove(channel="C4", timestamp=ts, name="eyes")
    with pytest.raises(SlackApiError, match="message_not_found"):
        web.reactions_add(channel="C4", timestamp="1.000001", name="eyes")


def test_replies_in_order_and_paginated(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C5", "question")["ts"]
    texts = [f"reply {i}" for i in range(5)]
    for text in texts:
        web.chat_postMessage(channel="C5", thread_ts=root, text=text)
    fake.user_message(HUMAN, "C5", "elsewhere")

    whole = web.conversations_replies(channel="C5", ts=root)
    assert [m["text"] for m in whole["messages"]] == ["question", *texts]
    assert whole["has_more"] is False
    assert whole["messages"][0]["reply_count"] == 5

    pages = [
        [m["text"] for m in page["messages"]] for page in web.conversations_replies(channel="C5", ts=root, limit=2)
    ]
    assert pages == [["question", "reply 0"], ["reply 1", "reply 2"], ["reply 3", "reply 4"]]

    first = web.conversations_replies(channel="C5", ts=root, limit=2)
    assert first["has_more"] is True
    assert first["response_metadata"]["next_cursor"]
    later = web.conversations_replies(
        channel="C5", ts=whole["messages"][3]["ts"], oldest=whole["messages"][3]["ts"], inclusive=True
    )
    assert [m["text"] for m in later["messages"]] == ["question", "reply 2", "reply 3", "reply 4"]
    with pytest.raises(SlackApiError, match="thread_not_found"):
        web.conversations_replies(channel="C5", ts="1.000001")
    with pytest.raises(SlackApiError, match="channel_not_found"):
        web.conversations_replies(channel="CNOPE", ts=root)


def test_history_lists_top_level_messages_newest_first(fake: FakeSlack, web: WebClient) -> None:
    first = fake.user_message(HUMAN, "D6", "first", channel_type="im")["ts"]
    web.chat_postMessage(channel="D6", thread_ts=first, text="in a thread")  # shown only as its root's reply
    for text in ("one", "two", "three"):
        web.chat_postMessage(channel="D6", text=text, metadata={"event_type": "k", "event_payload": {"k": text}})
    whole = web.conversations_history(channel="D6", include_all_metadata=True)
    assert [m["text"] for m in whole["messages"]] == ["three", "two", "one", "first"]
    assert whole["messages"][0]["metadata"]["event_payload"] == {"k": "three"}
    after = web.conversations_history(channel="D6", oldest=first)
    assert [m["text"] for m in after["messages"]] == ["three", "two", "one"]
    pages = [[m["text"] for m in page["messages"]] for page in web.conversations_history(channel="D6", limit=3)]
    assert pages == [["three", "two", "one"], ["first"]]
    with pytest.raises(SlackApiError, match="channel_not_found"):
        web.conversations_history(channel="DNOPE")
    with pytest.raises(SlackApiError, match="invalid_ts_oldest"):
        web.conversations_history(channel="D6", oldest="yesterday")


def test_users_info(fake: FakeSlack, web: WebClient) -> None:
    user = web.users_info(user=HUMAN)["user"]
    assert (user["id"], user["is_bot"]) == (HUMAN, False)
    assert set(user["profile"]) >= {"display_name", "real_name"}
    assert web.users_info(user=BOT)["user"]["is_bot"] is True
    with pytest.raises(SlackApiError, match="user_not_found"):
        web.users_info(user="B0001")


# -- failure injection ----------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(fake: FakeSlack, server_url: str) -> None:
    fake.fail("chat.postMessage", status=429, retry_after=1)
    web = WebClient(
        token=TOKEN, base_url=f"{server_url}/api/", retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)]
    )
    started = time.monotonic()
    assert web.chat_postMessage(channel="C6", text="eventually")["ok"]
    assert time.monotonic() - started >= 1.0
    calls = fake.assert_calls("chat.postMessage", 2)
    assert [c["status"] for c in calls] == [429, 200]
    assert calls[0]["response"] == {"ok": False, "error": "ratelimited"}
    assert len(fake.messages("C6")) == 1


def test_rate_limit_without_retry_handler_surfaces(fake: FakeSlack, web: WebClient) -> None:
    fake.fail("chat.postMessage", status=429)
    with pytest.raises(SlackApiError) as raised:
        web.chat_postMessage(channel="C6", text="x")
    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "1"


def test_server_errors_and_error_bodies(fake: FakeSlack, server_url: str, web: WebClient) -> None:
    fake.fail("reactions.add", times=2, status=503)
    retrying = WebClient(
        token=TOKEN, base_url=f"{server_url}/api/", retry_handlers=[ServerErrorRetryHandler(max_retry_count=2)]
    )
    ts = web.chat_postMessage(channel="C7", text="x")["ts"]
    assert retrying.reactions_add(channel="C7", timestamp=ts, name="eyes")["ok"]
    fake.fail("chat.postMessage", error="channel_not_found")
    with pytest.raises(SlackApiError, match="channel_not_found"):
        web.chat_postMessage(channel="C7", text="x")
    assert web.chat_postMessage(channel="C7", text="x")["ok"]


@pytest.mark.parametrize(
    ("cut", "raised"), [("reset", ConnectionResetError), ("close", RemoteDisconnected), ("partial", IncompleteRead)]
)
@pytest.mark.parametrize("applied", [True, False])
def test_a_cut_connection_answers_nothing(
    fake: FakeSlack, server_url: str, cut: str, raised: type[Exception], applied: bool
) -> None:
    """``cut`` answers nothing: the client reads a reset or a closed connection, or half an answer's body; with
    ``applied``, after the post."""
    bare = WebClient(token=TOKEN, base_url=f"{server_url}/api/", retry_handlers=[])
    fake.fail("chat.postMessage", cut=cut, applied=applied)
    with pytest.raises(raised) as caught:
        bare.chat_postMessage(channel="C9", text="cut")
    assert type(caught.value) is raised  # RemoteDisconnected is a ConnectionResetError too
    assert [m["text"] for m in fake.messages("C9")] == (["cut"] if applied else [])
    [call] = fake.calls("chat.postMessage")
    assert (call["status"], call["response"]) == (0, {"ok": False, "error": f"connection_{cut}"})
    assert bare.chat_postMessage(channel="C9", text="after")["ok"]  # the next call is answered


def test_fail_takes_one_of_the_cuts(fake: FakeSlack) -> None:
    with pytest.raises(FakeSlackError, match="cut is one of"):
        fake.fail("chat.postMessage", cut="drop")


def test_a_slow_answer_takes_effect_at_once_and_is_answered_when_released(fake: FakeSlack, web: WebClient) -> None:
    fake.slow("chat.postMessage", 120, match="held")
    answered: list[str] = []
    call = threading.Thread(target=lambda: answered.append(web.chat_postMessage(channel="C9", text="held")["ts"]))
    call.start()
    fake.wait_for_calls("chat.postMessage", 1, channel="C9")  # it took effect
    assert answered == []  # its answer is held
    fake.release("chat.postMessage")
    call.join(timeout=30)
    assert answered == [fake.messages("C9")[0]["ts"]]
    assert web.chat_postMessage(channel="C9", text="held again")["ok"]  # a released delay slows nothing more


# -- what Slack delivers to the app ------------------------------------------------------------


def test_mention_delivers_signed_message_and_app_mention(fake: FakeSlack, receiver: Receiver) -> None:
    result = fake.user_message(HUMAN, "C8", f"<@{BOT}> deploy please")
    assert [d["type"] for d in result["deliveries"]] == ["message", "app_mention"]
    assert all(d["status"] == 200 for d in result["deliveries"])
    payloads = [json.loads(verified(r)) for r in receiver.wait(2)]
    assert {r["path"] for r in receiver.requests} == {"/slack/events"}
    assert receiver.requests[0]["headers"]["Content-Type"] == "application/json"
    ids = [p["event_id"] for p in payloads]
    assert ids == [d["event_id"] for d in result["deliveries"]]
    assert len(set(ids)) == 2
    assert all(re.fullmatch(r"Ev[A-Z0-9]{10}", i) for i in ids)
    message, mention = payloads
    assert set(message) == set(ENVELOPE_KEYS.split())
    assert (message["type"], message["team_id"], message["api_app_id"]) == ("event_callback", TEAM, APP)
    assert message["authorizations"] == [
        {"enterprise_id": None, "team_id": TEAM, "user_id": BOT, "is_bot": True, "is_enterprise_install": False}
    ]
    assert message["event"]["type"] == "message"
    assert message["event"]["channel_type"] == "channel"
    assert mention["event"]["type"] == "app_mention"
    for event in (message["event"], mention["event"]):
        assert (event["user"], event["channel"], event["ts"]) == (HUMAN, "C8", result["ts"])
        assert event["text"] == f"<@{BOT}> deploy please"
        assert "thread_ts" not in event
        assert "bot_id" not in event


def test_thread_reply_and_dm(fake: FakeSlack, receiver: Receiver) -> None:
    root = fake.user_message(HUMAN, "C9", f"<@{BOT}> start")
    reply = fake.user_message(HUMAN, "C9", "postgres", thread_ts=root["ts"])
    assert [d["type"] for d in reply["deliveries"]] == ["message"]
    dm = fake.user_message(HUMAN, "D1", f"<@{BOT}> in private", channel_type="im")
    assert [d["type"] for d in dm["deliveries"]] == ["message"]
    events = [json.loads(verified(r))["event"] for r in receiver.wait(4)]
    assert (events[2]["thread_ts"], events[2]["parent_user_id"]) == (root["ts"], HUMAN)
    assert events[3]["channel_type"] == "im"


def test_click_delivers_signed_block_actions(fake: FakeSlack, web: WebClient, receiver: Receiver) -> None:
    root = fake.user_message(HUMAN, "C10", f"<@{BOT}> which db?")
    question = web.chat_postMessage(channel="C10", thread_ts=root["ts"], text="sqlite or postgres?", blocks=BUTTONS)
    receiver.requests.clear()
    result = fake.click(HUMAN, "C10", question["ts"], "answer_1")
    assert result["status"] == 200
    [request] = receiver.wait(1)
    assert request["path"] == "/slack/actions"
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    form = parse_qs(verified(request).decode())
    assert list(form) == ["payload"]
    payload = json.loads(form["payload"][0])
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == HUMAN
    container = {"type": "message", "message_ts": question["ts"], "channel_id": "C10", "is_ephemeral": False}
    assert payload["container"] == {**container, "thread_ts": root["ts"]}
    assert payload["channel"]["id"] == "C10"
    assert payload["message"]["blocks"] == BUTTONS
    assert payload["api_app_id"] == APP
    [action] = payload["actions"]
    assert action.items() >= {"action_id": "answer_1", "block_id": "choices", "value": "postgres"}.items()
    assert action["type"] == "button"
    assert action["text"] == {"type": "plain_text", "text": "Postgres", "emoji": True}


def test_response_url_replaces_the_message(fake: FakeSlack, web: WebClient, receiver: Receiver) -> None:
    ts = web.chat_postMessage(channel="C11", text="pick", blocks=BUTTONS)["ts"]
    payload = fake.click(HUMAN, "C11", ts, "answer_0")["payload"]
    answer = requests.post(payload["response_url"], json={"replace_original": True, "text": "SQLite"}, timeout=5)
    assert answer.json()["ok"] is True
    assert fake.messages("C11")[0]["text"] == "SQLite"
    assert fake.calls("response_url")[0]["args"] == {"replace_original": True, "text": "SQLite"}


def test_in_process_server_serves_the_same_api() -> None:
    with running(FakeSlackConfig(bot_token=TOKEN, signing_secret=SECRET)) as server:
        assert WebClient(token=TOKEN, base_url=f"{server.url}/api/").auth_test()["user_id"] == "UBOT"
        assert FakeSlack(server.url).calls("auth.test")[0]["status"] == 200


def test_bot_posts_echo_only_when_asked(fake: FakeSlack, web: WebClient, receiver: Receiver) -> None:
    web.chat_postMessage(channel="C12", text="quiet")
    fake.configure(echo_bot_messages=True)
    posted = web.chat_postMessage(channel="C12", text="loud")
    [request] = receiver.wait(1)
    event = json.loads(verified(request))["event"]
    assert (event["type"], event["bot_id"], event["app_id"], event["user"]) == ("message", "B0001", APP, BOT)
    assert (event["text"], event["ts"]) == ("loud", posted["ts"])
    web.chat_update(channel="C12", ts=posted["ts"], text="louder")
    changed = json.loads(verified(receiver.wait(2)[1]))["event"]
    assert (changed["subtype"], changed["message"]["text"]) == ("message_changed", "louder")


def test_redelivery_carries_retry_headers(fake: FakeSlack, receiver: Receiver) -> None:
    event_id = fake.user_message(HUMAN, "D2", "hello", channel_type="im")["deliveries"][0]["event_id"]
    assert fake.redeliver(event_id)["retry_num"] == 1
    first, again = receiver.wait(2)
    assert first["body"] == verified(again)
    assert again["headers"]["X-Slack-Retry-Num"] == "1"


def test_waiting_fails_with_what_was_received(fake: FakeSlack, web: WebClient) -> None:
    web.chat_postMessage(channel="C13", text="the only post")
    with pytest.raises(AssertionError, match=r"(?s)2 chat.postMessage.*the only post"):
        fake.wait_for_calls("chat.postMessage", 2, timeout=0.3)
    assert len(fake.wait_for_calls("chat.postMessage", 1, channel="C13")) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_exits_cleanly_on_signal(tmp_path: Path, sig: int) -> None:
    proc, url = start_fakeslack(tmp_path / "fakeslack.log")
    assert FakeSlack(url).config()["bot_user_id"] == BOT
    assert stop(proc, sig) == 0


# -- the terminal chat -----------------------------------------------------------------------


def test_chat_helpers() -> None:
    message = {"text": "sqlite or postgres?", "blocks": BUTTONS, "bot_id": "B0001"}
    assert [b["text"] for b in extract_buttons(message)] == ["SQLite", "Postgres"]
    assert format_message(message) == "bot> sqlite or postgres?\n     [1] SQLite\n     [2] Postgres (primary)"
    assert format_message({"blocks": BUTTONS[:1]}, edited=True) == "bot (edited)> sqlite or postgres?"
    assert format_reactions(["eyes", "white_check_mark"]) == "[reactions on your message: eyes, white_check_mark]"
    assert parse_command("/click 2") == ("click", "2")
    assert parse_command("/new  fresh start") == ("new", "fresh start")
    assert parse_command("/shrug ok") == ("unknown", "/shrug")  # refused locally, as Slack refuses it
    assert parse_command(" hello ") == ("say", "hello")
    assert parse_command("/quit") == ("quit", "")


def test_chat_session_round_trip(fake: FakeSlack, web: WebClient, receiver: Receiver) -> None:
    shown: list[str] = []
    session = ChatSession(fake, user=HUMAN, channel="C14", bot_user_id=BOT, out=shown.append)
    session.handle("which database?")
    thread = session.thread_ts
    assert thread is not None
    assert fake.messages("C14")[0]["text"] == f"<@{BOT}> which database?"
    web.reactions_add(channel="C14", timestamp=thread, name="eyes")
    web.chat_postMessage(channel="C14", thread_ts=thread, text="sqlite or postgres?", blocks=BUTTONS)
    lines = session.poll()
    assert lines == [
        "[reactions on your message: eyes]",
        "bot> sqlite or postgres?\n     [1] SQLite\n     [2] Postgres (primary)",
    ]
    assert session.poll() == []
    web.assistant_threads_setStatus(channel_id="C14", thread_ts=thread, status="is thinking…")
    assert session.poll() == ["[bot is thinking…]"]
    assert session.poll() == []  # shown once, while it lasts
    session.handle("/click 2")
    assert fake.deliveries("interactivity")[0]["status"] == 200
    session.handle("thanks")
    assert fake.messages("C14", thread)[-1]["text"] == "thanks"
    session.handle("/shrug thanks")
    assert fake.messages("C14", thread)[-1]["text"] == "thanks"  # nothing sent
    assert shown[-1] == "[/shrug is not a command here: nothing was sent. /help lists the commands.]"
    session.handle("/new")
    assert session.thread_ts is None
    assert session.handle("/quit") is False


# -- the workspace page ----------------------------------------------------------------------


def test_the_page_and_only_its_files_are_served(server_url: str) -> None:
    page = requests.get(f"{server_url}/", timeout=5)
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert '<script src="/web/app.js">' in page.text
    script = requests.get(f"{server_url}/web/app.js", timeout=5)
    assert (script.status_code, "javascript" in script.headers["Content-Type"]) == (200, True)
    for outside in ("/web/../state.py", "/web/%2e%2e/state.py", "/state.py"):
        assert requests.get(f"{server_url}{outside}", timeout=5).status_code == 404


def test_the_snapshot_shows_an_ephemeral_only_to_its_user(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C20", f"<@{BOT}> hi")
    web.chat_postEphemeral(channel="C20", user=HUMAN, text="only for you", thread_ts=root["ts"])
    mine, theirs = fake.snapshot(HUMAN), fake.snapshot("U0GUEST")
    assert [e["text"] for e in mine["ephemerals"]] == ["only for you"]
    assert theirs["ephemerals"] == []
    assert [m["text"] for m in theirs["messages"]["C20"]] == [f"<@{BOT}> hi"]
    people = {p["id"]: p for p in theirs["people"]}
    assert (people[HUMAN]["name"], people[HUMAN]["dm"]) == ("riley", "D0HUMAN")
    assert web.users_info(user=HUMAN)["user"]["real_name"] == "Riley Requester"  # the names the product sees too


def test_the_bots_thread_status_is_shown_until_cleared(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C23", f"<@{BOT}> hi")["ts"]
    web.assistant_threads_setStatus(channel_id="C23", thread_ts=root, status="is thinking…")
    assert fake.snapshot()["statuses"] == {f"C23/{root}": "is thinking…"}
    web.assistant_threads_setStatus(channel_id="C23", thread_ts=root, status="")
    assert fake.snapshot()["statuses"] == {}
    with pytest.raises(SlackApiError, match="invalid_thread_ts"):
        web.assistant_threads_setStatus(channel_id="C23", thread_ts="1.000001", status="is thinking…")
    web.assistant_threads_setStatus(channel_id="C23", thread_ts=root, status="is fetching example.com")
    web.chat_postMessage(channel="C23", thread_ts=root, text="found it")
    assert fake.snapshot()["statuses"] == {}  # the app answered: Slack clears the status
    with pytest.raises(SlackApiError, match="invalid_arguments"):
        web.assistant_threads_setStatus(channel_id="C23", thread_ts=root, status="hi", loading_messages=["."] * 11)
    assert fake.statuses("C23", root) == ["is thinking…", "", "is fetching example.com", "hi"]


def test_a_channel_can_refuse_statuses_with_slacks_errors(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C24", f"<@{BOT}> hi")["ts"]
    fake.refuse_status("C24", "not_allowed_token_type")
    with pytest.raises(SlackApiError, match="not_allowed_token_type"):
        web.assistant_threads_setStatus(channel_id="C24", thread_ts=root, status="is thinking…")
    with pytest.raises(FakeSlackError, match="error must be one of"):
        fake.refuse_status("C24", "no_such_error")
    fake.refuse_status("C24", None)
    web.assistant_threads_setStatus(channel_id="C24", thread_ts=root, status="is thinking…")
    assert fake.snapshot()["statuses"] == {f"C24/{root}": "is thinking…"}


def test_a_persons_reaction_is_stored_and_delivered(fake: FakeSlack, receiver: Receiver) -> None:
    ts = fake.user_message(HUMAN, "C21", "no mention here")["ts"]
    assert fake.react("U0GUEST", "C21", ts, ":tada:")["added"] is True
    assert fake.reactions("C21", ts) == ["tada"]
    assert fake.react("U0GUEST", "C21", ts, "tada")["added"] is False  # pressed again: taken back
    assert fake.reactions("C21", ts) == []
    events = [json.loads(verified(r))["event"] for r in receiver.wait(3)[1:]]  # after the message itself
    assert [(e["type"], e["reaction"], e["item"]) for e in events] == [
        (kind, "tada", {"type": "message", "channel": "C21", "ts": ts})
        for kind in ("reaction_added", "reaction_removed")
    ]


def test_the_stream_announces_each_change(fake: FakeSlack, server_url: str) -> None:
    with requests.get(f"{server_url}/_fake/stream", stream=True, timeout=5) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"
        lines = (line for line in stream.iter_lines(chunk_size=1, decode_unicode=True) if line.startswith("data: "))
        first = json.loads(next(lines).removeprefix("data: "))["version"]
        fake.user_message(HUMAN, "C22", "something changed")
        assert json.loads(next(lines).removeprefix("data: "))["version"] > first


def test_a_stream_takes_slacks_arguments_and_answers_slacks_errors(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C25", f"<@{BOT}> hi")["ts"]
    with pytest.raises(SlackApiError, match="missing_recipient_user_id"):  # outside a DM
        web.chat_startStream(channel="C25", thread_ts=root)
    with pytest.raises(SlackApiError, match="missing_recipient_team_id"):
        web.chat_startStream(channel="C25", thread_ts=root, recipient_user_id=HUMAN)
    web.assistant_threads_setStatus(channel_id="C25", thread_ts=root, status="is thinking…")
    ts = str(web.chat_startStream(channel="C25", thread_ts=root, recipient_user_id=HUMAN,
                                  recipient_team_id="T0001")["ts"])  # fmt: skip
    assert fake.status("C25", root) == ""  # the app replied: Slack clears the status
    task = {"type": "task_update", "id": "1", "title": "Fetching example.com", "status": "in_progress"}
    web.chat_appendStream(channel="C25", ts=ts, chunks=[task, {"type": "markdown_text", "text": "Hello "}])
    web.chat_appendStream(channel="C25", ts=ts, markdown_text="world")
    with pytest.raises(SlackApiError, match="msg_too_long"):
        web.chat_appendStream(channel="C25", ts=ts, markdown_text="x" * 12_001)
    with pytest.raises(SlackApiError, match="msg_too_long"):  # 12,000 a call, over all its chunks
        web.chat_appendStream(channel="C25", ts=ts, chunks=[{"type": "markdown_text", "text": "x" * 6001}] * 2)
    with pytest.raises(SlackApiError, match="invalid_chunks"):  # 50 chunks a call
        web.chat_appendStream(channel="C25", ts=ts, chunks=[{"type": "markdown_text", "text": "x"}] * 51)
    with pytest.raises(SlackApiError, match="invalid_chunks"):
        web.chat_appendStream(channel="C25", ts=ts, chunks=[{"type": "task_update", "id": "2", "status": "nope"}])
    [streaming] = fake.bot_replies("C25", root)
    assert streaming["text"] == "Hello world"
    assert streaming["stream"] == {"streaming": True, "tasks": [task], "display": "timeline", "plan": None}
    metadata = {"event_type": "agent_post", "event_payload": {"key": "k"}}
    with pytest.raises(SlackApiError, match="invalid_blocks"):  # 50 blocks under the text: nothing of it shows
        web.chat_stopStream(channel="C25", ts=ts, markdown_text="!", blocks=[{"type": "divider"}] * 51)
    with pytest.raises(SlackApiError, match="invalid_metadata"):
        web.chat_stopStream(channel="C25", ts=ts, markdown_text="!", metadata={"event_payload": {}})
    assert fake.bot_replies("C25", root)[0]["text"] == "Hello world"  # and the stream is still open
    web.chat_stopStream(channel="C25", ts=ts, metadata=metadata, chunks=[{**task, "status": "complete"}])
    with pytest.raises(SlackApiError, match="message_not_in_streaming_state"):
        web.chat_appendStream(channel="C25", ts=ts, markdown_text="late")
    [done] = web.conversations_replies(channel="C25", ts=root, include_all_metadata=True)["messages"][1:]
    assert done["metadata"] == metadata
    assert done["stream"]["streaming"] is False
    assert done["stream"]["tasks"][0]["status"] == "complete"
    dm = fake.user_message(HUMAN, "D25", "hi")["ts"]
    web.chat_startStream(channel="D25", thread_ts=dm)  # a DM needs no recipient


def test_a_stream_expires_and_a_channel_can_refuse_streams(fake: FakeSlack, web: WebClient) -> None:
    root = fake.user_message(HUMAN, "C26", f"<@{BOT}> hi")["ts"]
    fake.configure(stream_seconds=0.2)
    ts = str(
        web.chat_startStream(channel="C26", thread_ts=root, recipient_user_id=HUMAN, recipient_team_id="T0001")["ts"]
    )
    web.chat_appendStream(channel="C26", ts=ts, markdown_text="in time")
    time.sleep(0.3)
    with pytest.raises(SlackApiError, match="message_not_in_streaming_state"):
        web.chat_appendStream(channel="C26", ts=ts, markdown_text="too late")
    with pytest.raises(SlackApiError, match="message_not_in_streaming_state"):
        web.chat_stopStream(channel="C26", ts=ts)
    metadata = {"event_type": "agent_post", "event_payload": {"key": "k2"}}
    web.chat_update(channel="C26", ts=ts, text="replaced", metadata=metadata)  # the fallback: an update with a key
    [replaced] = web.conversations_replies(channel="C26", ts=root, include_all_metadata=True)["messages"][1:]
    assert (replaced["text"], replaced["metadata"]) == ("replaced", metadata)
    web.chat_delete(channel="C26", ts=ts)
    assert fake.bot_replies("C26", root) == []
    fake.refuse_streams("C26")
    with pytest.raises(SlackApiError, match="channel_type_not_supported"):
        web.chat_startStream(channel="C26", thread_ts=root, recipient_user_id=HUMAN, recipient_team_id="T0001")
    with pytest.raises(FakeSlackError, match="error must be one of"):
        fake.refuse_streams("C26", "no_such_error")
    fake.refuse_streams("C26", None)
    web.chat_startStream(channel="C26", thread_ts=root, recipient_user_id=HUMAN, recipient_team_id="T0001")

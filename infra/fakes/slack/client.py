"""``FakeSlack``, the client of the fake Slack's control API under ``/_fake/`` (``control_api.py``).

Tests, tools and the chat CLI use the control API only through ``FakeSlack`` over
HTTP, so they work the same against a server started by the stack runner. Its
assertions follow bolt-python's mock Web API server ("received N calls to
chat.postMessage") but poll, because the app under test answers asynchronously
(through Cloud Tasks), and fail showing what *was* received, which is usually the
quickest way to see what went wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from infra.fakes.control import ControlClient, ControlError

from .state import (
    Json,
)

T = TypeVar("T")


# -- client -------------------------------------------------------------------------------


class FakeSlackError(ControlError):
    """The control API refused a request (bad arguments, unknown message, ...), or could not be reached."""


class FakeSlack(ControlClient):
    """Drives one fake Slack server through its ``/_fake/`` endpoints."""

    error_type = FakeSlackError
    health_path = "/_fake/health"
    name = "fakeslack"

    # A control call that posts a message waits for the fake to deliver its events (each up to the fake's delivery
    # wait, FAKESLACK_DELIVERY_SECONDS): the default outlasts two of the test stack's 20 s deliveries.
    def __init__(self, base_url: str, *, timeout: float = 60.0) -> None:
        super().__init__(base_url, timeout=timeout)

    # -- transport ------------------------------------------------------------------

    def _request(self, verb: str, name: str, *, query: Json | None = None, body: Json | None = None) -> Json:
        return self._call(verb, f"/_fake/{name}", body, query=query)

    def _get(self, name: str, **query: Any) -> Json:
        return self._request("GET", name, query=query)

    def _list(self, name: str, **query: Any) -> list[Json]:
        """The list endpoints answer ``{"ok": true, "<name>": [...]}``."""
        return list(self._get(name, **query)[name])

    def _post(self, name: str, **body: Any) -> Json:
        return self._request("POST", name, body={k: v for k, v in body.items() if v is not None})

    # -- state ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget all messages, calls, failures and deliveries; restore the startup configuration."""
        self._post("reset")

    def configure(
        self,
        *,
        events_url: str | None = None,
        interactivity_url: str | None = None,
        echo_bot_messages: bool | None = None,
        stream_seconds: float | None = None,
        status_seconds: float | None = None,
    ) -> Json:
        """Change where events go (or whether the bot's posts echo back); returns the configuration."""
        return self._post(
            "config",
            events_url=events_url,
            interactivity_url=interactivity_url,
            echo_bot_messages=echo_bot_messages,
            stream_seconds=stream_seconds,
            status_seconds=status_seconds,
        )

    def config(self) -> Json:
        """Bot user id, team id, app id and the delivery URLs (never the secrets)."""
        return self._get("config")

    def calls(
        self, method: str | None = None, *, channel: str | None = None, thread_ts: str | None = None
    ) -> list[Json]:
        """Recorded Web API calls, oldest first: ``{method, args, time, status, response}``."""
        return self._list("calls", method=method, channel=channel, thread_ts=thread_ts)

    def messages(self, channel: str, thread_ts: str | None = None) -> list[Json]:
        """Stored messages in ts order: a whole channel, or one thread's root and replies."""
        return self._list("messages", channel=channel, thread_ts=thread_ts)

    def bot_replies(self, channel: str, thread_ts: str) -> list[Json]:
        """The bot's own posts in a thread."""
        return [m for m in self.messages(channel, thread_ts) if m.get("bot_id")]

    def ephemerals(self, channel: str | None = None, user: str | None = None) -> list[Json]:
        """Ephemeral posts (``chat.postEphemeral``), which never appear in ``messages``."""
        return self._list("ephemerals", channel=channel, user=user)

    def deliveries(self, kind: str | None = None) -> list[Json]:
        """Every request the fake sent to the app (``kind`` "event" or "interactivity") and its answer."""
        return self._list("deliveries", kind=kind)

    def reactions(self, channel: str, ts: str) -> list[str]:
        """Names of the reactions on one message, in the order they were first added."""
        for message in self.messages(channel):
            if message["ts"] == ts:
                return [r["name"] for r in message.get("reactions", [])]
        raise FakeSlackError(f"no message {ts} in {channel}")

    # -- acting as Slack and its people -------------------------------------------------

    def fail(
        self,
        method: str,
        times: int = 1,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: int | None = None,
        match: str | None = None,
        applied: bool = False,
        cut: str | None = None,
        applied_after: float | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (whose arguments contain ``match``, if given) fail: an HTTP
        ``status`` and/or an ``error`` body; ``applied``: each takes effect first (a gateway's 502 or 504). ``cut``
        answers nothing and cuts the connection instead: "reset" (the client reads ``ConnectionResetError``) or
        "close" (``RemoteDisconnected``), or answers 200 and closes it halfway through the body: "partial"
        (``http.client.IncompleteRead``); with ``applied``, after Slack took the call. ``applied_after``: each takes
        effect that many seconds after its failure is answered (Slack's backend still completing it behind a 504).

        A 429 carries ``Retry-After`` (1 second unless told otherwise), as Slack's do.
        """
        self._post("fail", method=method, times=times, status=status, error=error, retry_after=retry_after, match=match,
                   applied=applied, cut=cut, applied_after=applied_after)  # fmt: skip

    def views(self, user: str | None = None) -> list[Json]:
        """The modals open now (``views.open``), for one person or all."""
        return self._list("views", user=user)

    def submit_view(self, view_id: str, user: str, values: dict[str, str] | None = None) -> Json:
        """A person submits an open modal, with ``values`` by block id (others keep their initial values)."""
        return self._post("submit_view", view_id=view_id, user=user, values=values or {})

    def set_usergroup(self, group: str, users: list[str]) -> None:
        """Make a user group's members ``users`` (``usergroups.users.list`` answers them)."""
        self._post("usergroup", usergroup=group, users=users)

    def slow(self, method: str, seconds: float, times: int = 1, *, match: str | None = None) -> None:
        """Answer the next ``times`` calls of ``method`` (whose arguments contain ``match``) ``seconds`` late; each
        takes effect at once, as a slow Slack does."""
        self._post("slow", method=method, seconds=seconds, times=times, match=match)

    def release(self, method: str) -> None:
        """Answer the calls of ``method`` that ``slow`` holds back now, at once; the rest of its ``times`` are not
        slowed."""
        self._post("release", method=method)

    def refuse_status(self, channel: str, error: str | None = "missing_scope") -> None:
        """Make ``assistant.threads.setStatus`` answer ``error`` in ``channel`` (None: show statuses there again)."""
        self._post("refuse_status", channel=channel, error=error)

    def refuse_streams(self, channel: str, error: str | None = "channel_type_not_supported") -> None:
        """Make ``chat.startStream`` answer ``error`` in ``channel`` (None: stream there again)."""
        self._post("refuse_streams", channel=channel, error=error)

    def status(self, channel: str, thread_ts: str) -> str:
        """The status the bot shows under a thread now ("" when none)."""
        return str(self._get("status", channel=channel, thread_ts=thread_ts)["status"])

    def statuses(self, channel: str, thread_ts: str) -> list[str]:
        """The statuses the bot set on one thread, in order ("" clears)."""
        calls = self.calls("assistant.threads.setStatus")
        return [str(c["args"].get("status", "")) for c in calls
                if c["args"].get("channel_id") == channel and c["args"].get("thread_ts") == thread_ts]  # fmt: skip

    def user_message(
        self, user: str, channel: str, text: str, *, thread_ts: str | None = None, channel_type: str | None = None
    ) -> Json:
        """A person posts; returns ``{ts, channel, message, deliveries: [{event_id, type, status}]}``."""
        return self._post(
            "user_message", user=user, channel=channel, text=text, thread_ts=thread_ts, channel_type=channel_type
        )

    def open_assistant(self, user: str, *, context_channel: str | None = None) -> Json:
        """``user`` opens the app's assistant pane: returns ``{channel, thread_ts, deliveries}`` of the new thread."""
        return self._post("open_assistant", user=user, context_channel=context_channel)

    def change_assistant_context(self, channel: str, thread_ts: str, context_channel: str | None) -> Json:
        return self._post("assistant_context", channel=channel, thread_ts=thread_ts, context_channel=context_channel)

    def assistant_thread(self, channel: str, thread_ts: str | None = None) -> Json:
        """The title, suggested prompts (with their list's title) and context of one assistant thread, or with no
        ``thread_ts`` of the DM itself (agent view)."""
        where = {"thread_ts": thread_ts} if thread_ts else {}
        return dict(self._get("assistant_thread", channel=channel, **where)["thread"])

    def open_app_home(self, user: str) -> Json:
        """``user`` opens the app's Messages tab (agent view): ``{channel, deliveries}``."""
        return self._post("open_app_home", user=user)

    def change_app_context(self, user: str, context_channel: str | None) -> Json:
        """``user`` looks at ``context_channel`` with the app open (agent view): ``app_context_changed``."""
        return self._post("app_context", user=user, context_channel=context_channel)

    def click(
        self,
        user: str,
        channel: str,
        message_ts: str,
        action_id: str,
        *,
        value: str | None = None,
        block_id: str | None = None,
    ) -> Json:
        """A person presses a button; returns ``{status, payload}`` of the ``block_actions`` delivery."""
        where = {"user": user, "channel": channel, "message_ts": message_ts}
        return self._post("click", **where, action_id=action_id, value=value, block_id=block_id)

    def react(self, user: str, channel: str, ts: str, name: str) -> Json:
        """A person adds a reaction (or removes their own, pressed again); Slack delivers ``reaction_added``."""
        return self._request("POST", "react", body={"user": user, "channel": channel, "ts": ts, "name": name})

    def snapshot(self, user: str | None = None) -> Json:
        """What the workspace page shows ``user``: people, channels, every message, and only their ephemerals."""
        return self._get("snapshot", user=user)

    def redeliver(self, event_id: str) -> Json:
        """Deliver an event again with ``X-Slack-Retry-Num``, as Slack does when the app was slow."""
        return self._post("redeliver", event_id=event_id)

    # -- assertions ---------------------------------------------------------------------

    def describe(self, limit: int = 20) -> str:
        """The last calls, one line each, for assertion messages."""
        lines = []
        for call in self.calls()[-limit:]:
            args = call["args"]
            where = " ".join(f"{k}={args[k]}" for k in ("channel", "thread_ts", "ts", "name") if k in args)
            outcome = "ok" if call["response"].get("ok") else call["response"].get("error")
            text = str(args.get("text", ""))[:60]
            lines.append(f"  {call['method']} {where} -> {outcome} {text!r}")
        return "recent Web API calls:\n" + ("\n".join(lines) if lines else "  (none)")

    def assert_calls(
        self, method: str, count: int, *, channel: str | None = None, thread_ts: str | None = None
    ) -> list[Json]:
        """Exactly ``count`` calls of ``method`` (optionally in one channel or thread), right now."""
        calls = self.calls(method, channel=channel, thread_ts=thread_ts)
        if len(calls) != count:
            raise AssertionError(
                f"expected {count} {method} call(s) (channel={channel}, "
                f"thread_ts={thread_ts}), got {len(calls)}\n{self.describe()}"
            )
        return calls

    def wait_for(
        self, predicate: Callable[[], T], timeout: float = 10.0, *, interval: float = 0.05, what: str = "condition"
    ) -> T:
        """Poll until ``predicate()`` is truthy and return its value; fail with what was received.

        A predicate may also assert: its ``AssertionError`` counts as "not yet" and is
        shown if time runs out.
        """
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            try:
                value = predicate()
            except AssertionError as exc:
                value, last_error = None, f"\nlast failure: {exc}"
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} not met within {timeout}s{last_error}\n{self.describe()}")
            time.sleep(interval)

    def wait_for_calls(
        self,
        method: str,
        count: int,
        *,
        channel: str | None = None,
        thread_ts: str | None = None,
        timeout: float = 10.0,
    ) -> list[Json]:
        """Wait until at least ``count`` calls of ``method`` were received; returns them all."""

        def enough() -> list[Json]:
            calls = self.calls(method, channel=channel, thread_ts=thread_ts)
            return calls if len(calls) >= count else []

        what = f"{count} {method} call(s) (channel={channel}, thread_ts={thread_ts})"
        return self.wait_for(enough, timeout, what=what)

    def wait_for_bot_replies(self, channel: str, thread_ts: str, count: int = 1, timeout: float = 10.0) -> list[Json]:
        """Wait until the bot has posted ``count`` messages in a thread; returns them."""

        def enough() -> list[Json]:
            replies = self.bot_replies(channel, thread_ts)
            return replies if len(replies) >= count else []

        return self.wait_for(enough, timeout, what=f"{count} bot replies in {channel}/{thread_ts}")

"""Slack back-pressure: slack-sdk's own retry handlers, bounded by the time the current session has left.

Every Web API call goes through one ``WebClient`` built with these handlers (``shared.slack.client``): a 429 is retried
after Slack's ``Retry-After``, a 5xx and a cut connection after slack-sdk's exponential backoff (a post or a
stream's call only if Slack cannot have taken it: ``maybe_taken``). Outside a
session (the Slack ingress, the sweep) the retries are few, as before. Inside a session, ``within`` sets the
deadline of its wall budget: a wait that fits before it is taken (however many retries that makes, up to
``SESSION_MAX_RETRIES``), and one that does not is never started; outside a session no wait may be longer than
``OUTSIDE_SESSION_MAX_WAIT``. The call then fails at once with Slack's own
error, and ``storm`` turns that error into the plain reason the session ends ``failed`` with; a session never
sleeps past its budget and never ends silently because Slack was busy.

Imports nothing of slack-sdk at module level: ``shared.slack.client`` builds the client lazily, and so does this.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from http.client import IncompleteRead, RemoteDisconnected
from typing import TYPE_CHECKING, Any
from urllib.error import HTTPError, URLError

if TYPE_CHECKING:
    from slack_sdk.http_retry import RetryHandler

OUTSIDE_SESSION_RETRIES = 2  # the ingress answers Slack within 3 seconds; the sweep tries again next run
OUTSIDE_SESSION_MAX_WAIT = 3.0  # seconds one retry may wait there: a longer Retry-After fails the call at once
SESSION_MAX_RETRIES = 8  # the budget bounds them first: slack-sdk's backoff doubles from 0.5 s
SERVER_ERRORS = frozenset({500, 502, 503, 504})
# A connection that failed, was cut, or ended before the answer's body did (IncompleteRead: Slack answered, so it may
# have taken the call; urllib raises it bare, as no OSError).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (URLError, ConnectionError, RemoteDisconnected, TimeoutError,
                                                  IncompleteRead)  # fmt: skip
# A stream's calls: one Slack answered too late (a read timeout) may have taken effect, and sent again it would show
# its text twice, open a second message, or find its stream stopped; the stream degrades instead (slack/stream.py).
STREAM_CALLS = frozenset({"chat.startStream", "chat.appendStream", "chat.stopStream"})
# Calls never sent again after a read timeout, a connection cut after they were sent (reset, closed without an
# answer, or halfway through the answer), or an answer in ``MAYBE_APPLIED``: Slack may have taken them. A post is
# looked for by its key instead (slack/client.py); a stream degrades. Only a connection that never reached Slack
# (refused, a name not found), a 503 or a 429 is tried again.
UNREPEATED_AFTER_TIMEOUT = STREAM_CALLS | {"chat.postMessage"}
# Answers after which the call may have been made: Slack's 500 (``internal_error``: "some aspect of the operation
# succeeded before the error was raised"), a gateway's 502 or 504. A 503 (or a 429) is Slack refusing the call.
MAYBE_APPLIED = frozenset({500, 502, 504})
NEVER_SENT: tuple[type[OSError], ...] = (ConnectionRefusedError, socket.gaierror)  # a connect that failed


def _method(request: Any) -> str:
    return str(request.url).rsplit("/", 1)[-1]


def never_sent(error: BaseException) -> bool:
    """``error`` is a connection that failed before the request reached Slack: a refused connect (urllib wraps the
    connect's error in ``URLError``), or a host name not found. A read timeout, a reset or a remote disconnect
    while the answer was awaited or read (urllib raises those bare, and ``IncompleteRead``), or a reset while sending
    may have come after Slack took the call."""
    reason = error.reason if isinstance(error, URLError) and not isinstance(error, HTTPError) else error
    return isinstance(reason, NEVER_SENT)


def maybe_taken(error: BaseException) -> bool:
    """A call that failed with ``error`` may have taken effect at Slack: a connection error other than one that never
    reached Slack (``never_sent``), Slack's 500, or a gateway's 502 or 504 (``MAYBE_APPLIED``)."""
    from slack_sdk.errors import SlackApiError

    if isinstance(error, SlackApiError):
        return int(getattr(error.response, "status_code", 200) or 200) in MAYBE_APPLIED
    return isinstance(error, CONNECTION_ERRORS) and not never_sent(error)


_deadline: ContextVar[float | None] = ContextVar("slack_deadline", default=None)
_max_wait: ContextVar[float | None] = ContextVar("slack_max_wait", default=None)


@contextmanager
def waiting_at_most(seconds: float) -> Iterator[None]:
    """Slack calls in this block wait at most ``seconds`` for one retry, whatever the session has left: a longer
    ``Retry-After`` fails the call at once (a thread read under a one-a-minute limit goes on without it)."""
    token = _max_wait.set(seconds)
    try:
        yield
    finally:
        _max_wait.reset(token)


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Slack calls in this block (this thread or task) wait for Slack only while ``seconds`` have not passed."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def time_left() -> float | None:
    """Seconds before the current session's deadline (None outside a session)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def retry_after(response: Any) -> float:
    """The ``Retry-After`` of a slack-sdk ``HttpResponse`` (or a ``SlackResponse``), in seconds; 1 if absent."""
    headers = getattr(response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            first = value[0] if isinstance(value, list | tuple) else value
            try:
                return max(0.0, float(first))
            except (TypeError, ValueError):
                return 1.0
    return 1.0


def _fits(wait: float) -> bool:
    left = time_left()
    cap = _max_wait.get()
    return wait < (OUTSIDE_SESSION_MAX_WAIT if left is None else left) and (cap is None or wait <= cap)


def _limit(handler: RetryHandler) -> int:
    return handler.max_retry_count if time_left() is None else SESSION_MAX_RETRIES


def _sleep_within(handler: RetryHandler, state: Any) -> None:
    """slack-sdk's backoff for this attempt, never past the deadline."""
    duration = handler.interval_calculator.calculate_sleep_duration(state.current_attempt)
    left = time_left()
    time.sleep(max(0.0, duration if left is None else min(duration, left)))


def _next_attempt(handler: RetryHandler, state: Any) -> None:
    """What slack-sdk does between attempts, its backoff cut at the deadline."""
    state.next_attempt_requested = True
    _sleep_within(handler, state)
    state.increment_current_attempt()


def retry_handlers() -> list[RetryHandler]:
    """Rate limits, server errors and cut connections, each retried only while the session's budget allows."""
    from slack_sdk.http_retry.builtin_handlers import (
        ConnectionErrorRetryHandler,
        RateLimitErrorRetryHandler,
        ServerErrorRetryHandler,
    )

    class RateLimits(RateLimitErrorRetryHandler):
        """A 429 waits ``Retry-After`` (plus slack-sdk's jitter, under a second) only if that ends in time."""

        def can_retry(self, *, state: Any, request: Any, response: Any = None, error: Any = None) -> bool:
            if state.current_attempt >= _limit(self):
                return False
            ok = self._can_retry(state=state, request=request, response=response, error=error)
            return ok and _fits(retry_after(response) + 1.0)

    class ServerErrors(ServerErrorRetryHandler):
        """500, 502, 503 and 504 (slack-sdk's own covers 500 and 503), after its backoff, if that ends in time; for a
        post or a stream's call only a 503 (``MAYBE_APPLIED``)."""

        def can_retry(self, *, state: Any, request: Any, response: Any = None, error: Any = None) -> bool:
            if state.current_attempt >= _limit(self) or response is None:
                return False
            if response.status_code in MAYBE_APPLIED and _method(request) in UNREPEATED_AFTER_TIMEOUT:
                return False  # Slack may have taken it (a chunk appended twice, a second post): MAYBE_APPLIED
            return response.status_code in SERVER_ERRORS and _fits(0.5 * 2**state.current_attempt)

        def prepare_for_next_attempt(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> None:
            _next_attempt(self, state)

    class Connections(ConnectionErrorRetryHandler):
        """A refused or cut connection, after slack-sdk's backoff, if that ends in time; a stream's call or a post
        only if it never reached Slack (a reset or a timeout may have come after Slack took it)."""

        def can_retry(self, *, state: Any, request: Any, response: Any = None, error: Any = None) -> bool:
            if state.current_attempt >= _limit(self):
                return False
            if _method(request) in UNREPEATED_AFTER_TIMEOUT and error is not None and not never_sent(error):
                return False
            ok = self._can_retry(state=state, request=request, response=response, error=error)
            return ok and _fits(0.5 * 2**state.current_attempt)

        def prepare_for_next_attempt(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> None:
            _next_attempt(self, state)

    count = OUTSIDE_SESSION_RETRIES
    return [
        RateLimits(max_retry_count=count),
        ServerErrors(max_retry_count=count),
        Connections(max_retry_count=count, error_types=[*CONNECTION_ERRORS]),
    ]


def storm(exc: BaseException) -> str | None:
    """If ``exc`` is Slack still refusing after the retries above (a 429, a 5xx, no connection): what to tell
    people, in plain words; else None (a real bug, or an error Slack gives for a reason of its own)."""
    from slack_sdk.errors import SlackApiError

    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 200) or 200)
        error = str(response.get("error") or "") if hasattr(response, "get") else ""
        if status == 429 or error == "ratelimited":
            wait, left = retry_after(response), time_left()
            if left is not None and wait + 1.0 >= left:
                return (f"Slack asked me to wait {wait:.0f} s before writing again, longer than the "
                        f"{max(left, 0.0):.0f} s this session had left")  # fmt: skip
            return "Slack kept rate-limiting my messages"
        if status >= 500:
            return f"Slack kept failing ({status} {error or 'server error'})"
        return None
    if isinstance(exc, CONNECTION_ERRORS):
        return f"Slack could not be reached ({type(exc).__name__})"
    return None

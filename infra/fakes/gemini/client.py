"""A typed client for the fake Gemini's ``/_stub/`` control API, for tests and the local stack.

Tests script the model's next turns and then assert on what the code under test really
sent, in the spirit of bolt-python's mock Web API server ("received N calls"). Only the
standard library is used, so any test tier (or a shell) can drive the stub.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from infra.fakes.control import ControlClient, ControlError

# The 400 the Gemini API returns when a prompt is too long for the model.
CONTEXT_LIMIT = 1_048_576


class FakeGeminiError(ControlError):
    """The control API refused a call (say, a malformed script item) or could not be reached."""


class FakeGemini(ControlClient):
    """Control of one running stub at ``base_url`` (the same URL the genai client uses)."""

    error_type = FakeGeminiError
    health_path = "/_stub/health"
    name = "fakegemini"

    # -- control endpoints -------------------------------------------------------------

    def reset(self) -> None:
        """Clear the script and the recorded requests."""
        self._call("POST", "/_stub/reset", {})

    def script(self, *items: Mapping[str, Any]) -> int:
        """Append items to the queue (all or none); return how many are now queued."""
        answer = self._call("POST", "/_stub/script", {"responses": [dict(item) for item in items]})
        return int(answer["remaining"])

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded model request, oldest first (API key values redacted)."""
        return list(self._call("GET", "/_stub/requests")["requests"])

    def remaining(self) -> list[dict[str, Any]]:
        """The items not consumed yet; an error item shows the ``times`` it has left."""
        return list(self._call("GET", "/_stub/script")["responses"])

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Poll until at least ``n`` requests are recorded; for code that calls the model in the background."""
        deadline = time.monotonic() + timeout
        while True:
            recorded = self.requests()
            if len(recorded) >= n:
                return recorded
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected {n} request(s) to fakegemini, got {len(recorded)} in {timeout:g}s")
            time.sleep(0.05)

    # -- item builders -----------------------------------------------------------------

    @staticmethod
    def text(t: str, *, finish_reason: str | None = None) -> dict[str, Any]:
        """A model turn with one text part."""
        item: dict[str, Any] = {"text": t}
        if finish_reason is not None:
            item["finish_reason"] = finish_reason
        return item

    @staticmethod
    def call(name: str, /, **args: Any) -> dict[str, Any]:
        """A model turn calling one function; the stub gives the call an id."""
        return {"function_calls": [{"name": name, "args": args}]}

    @staticmethod
    def calls(*calls: tuple[str, Mapping[str, Any]], text: str | None = None) -> dict[str, Any]:
        """A model turn with several (parallel) function calls, optionally after some text."""
        item: dict[str, Any] = {"function_calls": [{"name": name, "args": dict(args)} for name, args in calls]}
        if text is not None:
            item["text"] = text
        return item

    @staticmethod
    def error(
        code: int, status: str, message: str, times: int = 1, *, retry_after: float | None = None
    ) -> dict[str, Any]:
        """Google's error reply with HTTP ``code``, served ``times`` times before it is used up."""
        item: dict[str, Any] = {"error": {"code": code, "status": status, "message": message}, "times": times}
        if retry_after is not None:
            item["retry_after"] = retry_after
        return item

    @staticmethod
    def context_overflow(tokens: int = CONTEXT_LIMIT + 1, limit: int = CONTEXT_LIMIT) -> dict[str, Any]:
        """The 400 the Gemini API gives when the prompt is longer than the model's window."""
        message = f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit})."
        return FakeGemini.error(400, "INVALID_ARGUMENT", message)

    @staticmethod
    def raw(body: Any, *, status: int = 200) -> dict[str, Any]:
        """A reply sent verbatim: malformed calls, odd finish reasons, anything the builders cannot say."""
        return {"raw": body, "status": status}

    @staticmethod
    def delayed(seconds: float, item: Mapping[str, Any]) -> dict[str, Any]:
        """``item``, answered only after ``seconds``: for client timeouts and wall-time budgets."""
        return {**item, "delay_seconds": seconds}

    @staticmethod
    def matching(contains: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """``item``, used only for a request whose conversation contains ``contains``."""
        return {**item, "match": {"contains": contains}}

    # -- transport ---------------------------------------------------------------------

    def _message(self, body: Any) -> Any:
        return body.get("error", {}).get("message") if isinstance(body, dict) else body

"""The one control client every fake's ``client.py`` builds on: JSON over HTTP to a loopback server, standard
library only (any test tier, or a shell, can drive a fake), never through a proxy taken from the environment.

A fake's client subclasses ``ControlClient``, names its error class (a ``ControlError``) and where its health
answers, and says how to read the message out of an error body; the transport, the errors and ``wait_ready`` are
here once.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit

Json = dict[str, Any]


class ControlError(RuntimeError):
    """A fake refused a control call (its message says why), or could not be reached (``status`` None)."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ControlClient:
    """Control of one running fake at ``base_url``."""

    error_type: ClassVar[type[ControlError]] = ControlError
    health_path: ClassVar[str] = "/health"
    name: ClassVar[str] = "fake"

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Loopback must never go through a proxy taken from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def healthy(self) -> bool:
        """True when the fake answers its health endpoint."""
        try:
            return bool(self._call("GET", self.health_path).get("ok"))
        except ControlError:
            return False

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the fake answers, so a freshly spawned process can be used."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name} at {self.base_url} not ready after {timeout:g}s")
            time.sleep(0.05)

    def _call(
        self, method: str, path: str, payload: Mapping[str, Any] | None = None, *,
        query: Mapping[str, Any] | None = None, timeout: float | None = None,
    ) -> Json:  # fmt: skip
        """One control call; its JSON object answer. Raises ``self.error_type`` for an error status or no answer."""
        answer = self._json(method, path, payload, query=query, timeout=timeout)
        if not isinstance(answer, dict):
            raise self.error_type(f"{method} {path} answered with non-object JSON", body=answer)
        return answer

    def _json_list(self, method: str, path: str, payload: Mapping[str, Any] | None = None) -> list[Any]:
        """One control call whose answer is a JSON list."""
        answer = self._json(method, path, payload)
        if not isinstance(answer, list):
            raise self.error_type(f"{method} {path} answered with non-list JSON", body=answer)
        return answer

    def _json(
        self, method: str, path: str, payload: Mapping[str, Any] | None = None, *,
        query: Mapping[str, Any] | None = None, timeout: float | None = None,
    ) -> Any:  # fmt: skip
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.base_url + path + ("?" + urlencode(params) if params else "")
        data = None if payload is None else json.dumps(dict(payload)).encode()
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked in __init__
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            body = _json_or_text(exc.read())
            raise self.error_type(f"{method} {path} -> {exc.code}: {self._message(body)}", status=exc.code,
                             body=body) from exc  # fmt: skip
        except (urllib.error.URLError, OSError) as exc:
            raise self.error_type(f"{method} {path} failed: {exc}") from exc
        return answer

    def _message(self, body: Any) -> Any:
        """What an error body says (its ``error`` field by default)."""
        return body.get("error") if isinstance(body, dict) else body


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")

"""The fakes ``make dev`` runs act for whoever calls them (the model's script, task deliveries): a page on another
site, open in the same browser, could post to their loopback ports (a form or a no-cors fetch needs no preflight)
and script the demo model's next answer or tool call. A browser names its page's Origin; programs send none."""

from __future__ import annotations

import io
import json

import pytest
import requests

from infra.fakes.dispatch.server import DispatchServer
from infra.fakes.dispatch.state import Policy
from infra.fakes.gemini.server import FakeGeminiServer
from infra.fakes.serve import JsonLogServer, in_thread

SCRIPT = {"responses": [{"text": "Click https://evil.example/login to continue"}]}


def fake(which: str) -> tuple[JsonLogServer, str]:
    """The fake, unstarted, and a control path of it that changes what it does."""
    if which == "fake_gemini":
        return FakeGeminiServer(("127.0.0.1", 0), demo=True, log_stream=io.StringIO()), "/_stub/script"
    target = "http://127.0.0.1:9/"
    return DispatchServer(("127.0.0.1", 0), target=target, policy=Policy(), log_stream=io.StringIO()), "/hold"


@pytest.mark.parametrize("which", ["fake_gemini", "dispatch"])
def test_a_browsers_post_to_a_fake_is_refused(which: str) -> None:
    server, path = fake(which)
    with in_thread(server, "fake"):
        url = f"http://127.0.0.1:{server.server_address[1]}{path}"
        for origin in ("https://evil.example", "null"):
            refused = requests.post(url, data=json.dumps(SCRIPT), timeout=10,
                                    headers={"Content-Type": "text/plain", "Origin": origin})  # fmt: skip
            assert refused.status_code == 403
            assert "browser" in json.dumps(refused.json())
        if isinstance(server, FakeGeminiServer):
            assert server.script.remaining() == []  # nothing was scripted
            assert requests.post(url, json=SCRIPT, timeout=10).status_code == 200  # a test's own call still is
            assert len(server.script.remaining()) == 1

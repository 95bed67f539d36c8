"""The fakes' command lines (``python -m infra.fakes.<name>``) on the shared serve loop's helpers: every flag reaches
the fake's configuration with its type, and the serve thread stops with the block."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from infra.fakes.dispatch import __main__ as dispatch_main
from infra.fakes.dispatch.state import Policy
from infra.fakes.mcp import __main__ as mcp_main
from infra.fakes.serve import JsonLogServer, from_args, in_thread
from infra.fakes.slack import __main__ as slack_main
from infra.fakes.slack import make_server as make_slack_server
from infra.fakes.slack.state import FakeSlackConfig


def test_the_dispatchers_flags_become_its_policy_with_policys_defaults_and_types() -> None:
    args = dispatch_main.parse_args(["--target", "http://127.0.0.1:9/run", "--max-attempts", "0", "--deadline", "5"])
    policy = from_args(Policy, args)
    assert policy == Policy(max_attempts=0, deadline=5.0)
    assert (args.port, args.host, args.queue) == (dispatch_main.DEFAULT_PORT, "127.0.0.1", "default")
    assert isinstance(policy.max_concurrent, int)
    assert isinstance(policy.min_backoff, float)


def test_the_fake_slacks_flags_become_its_config() -> None:
    args = slack_main.parse_args(
        ["--bot-token", "xoxb-t", "--signing-secret", "s", "--operators", "U1, U2,", "--events-url", "", "--port", "0"]
    )
    config = from_args(
        FakeSlackConfig,
        args,
        events_url=args.events_url or None,
        operators=tuple(u.strip() for u in args.operators.split(",") if u.strip()),
    )
    assert (config.bot_token, config.signing_secret, config.operators) == ("xoxb-t", "s", ("U1", "U2"))
    assert config.events_url is None
    assert config.team_id == "T0001"
    assert args.port == 0


def test_the_mcp_server_needs_a_port() -> None:
    with pytest.raises(SystemExit):
        mcp_main.parse_args([])
    assert mcp_main.parse_args(["--port", "0", "--legacy"]).legacy is True


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"hi")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_a_server_serves_in_its_thread_for_the_block_only() -> None:
    server = JsonLogServer(("127.0.0.1", 0), _Hello)
    with in_thread(server, "hello"), urllib.request.urlopen(f"{server.url}/", timeout=5) as answer:  # noqa: S310
        assert answer.read() == b"hi"
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"{server.url}/", timeout=5)  # noqa: S310 - closed with the block


BURST = 32  # a tree's children calling a fake at once (bench.trees)


@pytest.mark.parametrize("make", ["json_log", "slack"])
def test_a_fake_takes_a_burst_of_connections_before_it_accepts_any(make: str) -> None:
    """The kernel completes every connection of a burst into the fake's listen backlog, even before the fake accepts
    one: with socketserver's backlog of 5 the 7th connection's handshake was dropped and waited a second for TCP's
    retransmission (issue 28.4), where Google's and Slack's front ends take them all."""
    server = (
        JsonLogServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        if make == "json_log"
        else make_slack_server(FakeSlackConfig(bot_token="xoxb-t", signing_secret="s"))
    )
    host, port = server.server_address[:2]
    sockets: list[socket.socket] = []
    try:  # nothing serves: only the kernel answers the handshakes
        for _ in range(BURST):
            sockets.append(socket.create_connection((str(host), int(port)), timeout=0.5))
    finally:
        for sock in sockets:
            sock.close()
        server.server_close()
    assert len(sockets) == BURST

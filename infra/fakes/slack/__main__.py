"""``python -m infra.fakes.slack``: serve the fake Slack until SIGTERM or SIGINT (the serve loop, its ready line and
its shutdown are ``infra/fakes/serve.py``'s)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from infra.fakes.serve import arguments, from_args, serve

from . import make_server
from .state import FakeSlackConfig


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments("python -m infra.fakes.slack", "The fake Slack: Web API, events and the workspace page.")
    parser.add_argument("--bot-token", required=True, help="the only token the Web API accepts")
    parser.add_argument("--signing-secret", required=True, help="signs events and interactivity requests")
    parser.add_argument("--bot-user-id", default="UBOT")
    parser.add_argument("--team-id", default="T0001")
    parser.add_argument("--app-id", default="A0001")
    parser.add_argument("--events-url", default=None, help="where message/app_mention events are POSTed")
    parser.add_argument("--interactivity-url", default=None, help="where block_actions payloads are POSTed")
    parser.add_argument("--operators", default="", help="comma-separated user ids the page labels as operators")
    parser.add_argument(
        "--console",
        action="store_true",
        help="also answer the console's /_console/ reads (the product's Firestore, from this process's environment)",
    )
    parser.add_argument("--notice", default="", help="a line the workspace page shows at the top")
    parser.add_argument(
        "--echo-bot-messages",
        action="store_true",
        help="also deliver the bot's own posts as message events, as Slack does",
    )
    parser.add_argument(
        "--delivery-seconds",
        type=float,
        default=float(os.environ.get("FAKESLACK_DELIVERY_SECONDS") or 3),
        help="how long a delivery waits for the app's answer before it counts as timed out (Slack: three seconds)",
    )
    parser.add_argument(
        "--stream-seconds",
        type=float,
        default=float(os.environ.get("FAKESLACK_STREAM_SECONDS") or 300),
        help="a streamed message takes appends this long after it started, as Slack's (about five minutes)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = from_args(
        FakeSlackConfig,
        args,
        events_url=args.events_url or None,
        interactivity_url=args.interactivity_url or None,
        operators=tuple(u.strip() for u in args.operators.split(",") if u.strip()),
    )
    server = make_server(config, args.host, args.port)
    if args.console:
        from ops.console import serve_workspace_console

        page, port = server.serve_page, server.server_address[1]
        server.serve_page = lambda handler, ws, target: (
            serve_workspace_console(handler, target, port) or page(handler, ws, target)
        )
    return serve(
        server,
        name="fakeslack",
        ready=f"fakeslack listening on {server.url}",
        stopped=lambda: print("fakeslack stopped", file=sys.stderr, flush=True),
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m infra.fakes.gemini``: run the fake Gemini until SIGTERM or SIGINT (the serve loop, its ready line and
its shutdown are ``infra/fakes/serve.py``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from infra.fakes.serve import arguments, serve

from .server import FakeGeminiServer

DEFAULT_PORT = 8089


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(
        "python -m infra.fakes.gemini",
        "A scripted Gemini REST stub for tests and offline demos (loopback only).",
        port=DEFAULT_PORT,
    )
    parser.add_argument("--api-key", default=None, help="if set, requests must carry this key (x-goog-api-key)")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="answer unscripted requests with the deterministic '[demo model]' stand-in instead of a 500",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    server = FakeGeminiServer((args.host, args.port), api_key=args.api_key, demo=args.demo)
    return serve(
        server,
        name="fakegemini",
        ready=f"fakegemini listening on {server.url}",
        started=lambda: server.log_json(
            {"event": "start", "url": server.url, "demo": args.demo, "api_key_required": bool(args.api_key)}
        ),
        stopped=lambda: server.log_json({"event": "stop", "url": server.url}),
    )


if __name__ == "__main__":
    raise SystemExit(main())

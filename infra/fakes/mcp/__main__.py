"""``python -m infra.fakes.mcp --port N [--state-ttl S] [--token T] [--legacy]``: the sample MCP server on loopback,
until SIGTERM or SIGINT (the serve loop, its ready line and its shutdown are ``infra/fakes/serve.py``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from infra.fakes.serve import UvicornServer, arguments, serve

from .server import app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments("python -m infra.fakes.mcp", "The sample MCP server (loopback only).", port=None)
    parser.add_argument("--state-ttl", type=float, default=600.0, help="seconds a request state stays valid")
    parser.add_argument("--token", default="", help="bearer token MCP requests must carry (none when empty)")
    parser.add_argument("--legacy", action="store_true", help="speak only the older (initialize) handshake")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    served = app(state_ttl=args.state_ttl, token=args.token, legacy=args.legacy)
    server = UvicornServer(served, host=args.host, port=args.port)
    return serve(server, name="mcp", ready=f"mcp listening on {server.url}", started=server.wait_started)


if __name__ == "__main__":
    raise SystemExit(main())

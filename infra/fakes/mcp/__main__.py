"""python -m infra.fakes.mcp --port N [--state-ttl S] [--token T] [--legacy]: the sample MCP server on loopback."""

from __future__ import annotations

import argparse

from infra.fakes.mcp.server import app
from infra.fakes.serve import UvicornServer, serve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state-ttl", type=float, default=600.0, help="seconds a request state stays valid")
    parser.add_argument("--token", default="", help="bearer token MCP requests must carry (none when empty)")
    parser.add_argument("--legacy", action="store_true", help="speak only the older (initialize) handshake")
    args = parser.parse_args()
    served = app(state_ttl=args.state_ttl, token=args.token, legacy=args.legacy)
    server = UvicornServer(served, host=args.host, port=args.port)
    return serve(server, name="mcp", ready=f"mcp listening on {server.url}", started=server.wait_started)


if __name__ == "__main__":
    raise SystemExit(main())

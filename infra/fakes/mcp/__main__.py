"""python -m infra.fakes.mcp --port N [--state-ttl S] [--token T] [--legacy]: the sample MCP server on loopback."""

from __future__ import annotations

import argparse

import uvicorn

from infra.fakes.mcp.server import app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state-ttl", type=float, default=600.0, help="seconds a request state stays valid")
    parser.add_argument("--token", default="", help="bearer token MCP requests must carry (none when empty)")
    parser.add_argument("--legacy", action="store_true", help="speak only the older (initialize) handshake")
    args = parser.parse_args()
    served = app(state_ttl=args.state_ttl, token=args.token, legacy=args.legacy)
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

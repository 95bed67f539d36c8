"""``python -m infra.fakes.dispatch --target URL``: deliver tasks to URL as Cloud Tasks does, until SIGTERM or SIGINT.

The ready line goes to stdout only once the socket is bound and the signal handlers are in place, so whoever
starts it (a test, the local stack) can wait for that line, read the port from it when ``--port 0`` was asked
for, and stop it cleanly.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from infra.fakes.serve import serve

from .server import DispatchServer
from .state import Policy

DEFAULT_PORT = 8093
READY_PREFIX = "dispatch listening on "


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = Policy()
    parser = argparse.ArgumentParser(
        prog="python -m infra.fakes.dispatch",
        description=(
            "Deliver tasks the Cloud Tasks emulator dispatches here to --target the way Cloud Tasks does: "
            "in parallel, with its headers, retried with backoff (loopback only)."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to bind, 0 for any free one (default: {DEFAULT_PORT})"
    )
    parser.add_argument("--target", required=True, help="the URL tasks are delivered to (agent_session)")
    parser.add_argument(
        "--queue", default="default", help="queue name for a task that arrives without X-CloudTasks-QueueName"
    )
    parser.add_argument(
        "--max-concurrent",
        type=int,
        default=defaults.max_concurrent,
        help=f"attempts of one queue in flight at once (default: {defaults.max_concurrent})",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=defaults.max_attempts,
        help=f"attempts per delivery, the first included; 0 for unlimited (default: {defaults.max_attempts})",
    )
    parser.add_argument(
        "--max-retry-duration",
        type=float,
        default=defaults.max_retry_duration,
        help="seconds from the first attempt during which retries go on past --max-attempts, as Cloud Tasks' "
        f"max_retry_duration; 0 for attempts alone (default: {defaults.max_retry_duration:g})",
    )
    parser.add_argument(
        "--min-backoff", type=float, default=defaults.min_backoff, help="seconds before the first retry"
    )
    parser.add_argument(
        "--max-backoff", type=float, default=defaults.max_backoff, help="the longest wait between two attempts"
    )
    parser.add_argument(
        "--max-doublings",
        type=int,
        default=defaults.max_doublings,
        help="times the wait doubles before it grows linearly",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=defaults.deadline,
        help=f"seconds one attempt is waited for, like dispatch_deadline (default: {defaults.deadline:g})",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    policy = Policy(
        max_concurrent=args.max_concurrent,
        max_attempts=args.max_attempts,
        max_retry_duration=args.max_retry_duration,
        min_backoff=args.min_backoff,
        max_backoff=args.max_backoff,
        max_doublings=args.max_doublings,
        deadline=args.deadline,
    )
    server = DispatchServer((args.host, args.port), target=args.target, policy=policy, queue=args.queue)
    return serve(
        server,
        name="dispatch",
        ready=f"{READY_PREFIX}{server.url}",
        started=lambda: server.log_json(
            {"event": "start", "url": server.url, "target": args.target, "policy": policy.public()}
        ),
        stopped=lambda: server.log_json({"event": "stop", "url": server.url}),
    )


if __name__ == "__main__":
    raise SystemExit(main())

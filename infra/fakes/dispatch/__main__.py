"""``python -m infra.fakes.dispatch --target URL``: deliver tasks to URL as Cloud Tasks does, until SIGTERM or SIGINT
(the serve loop, its ready line and its shutdown are ``infra/fakes/serve.py``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from infra.fakes.serve import arguments, from_args, serve

from .server import DispatchServer
from .state import Policy

DEFAULT_PORT = 8093
READY_PREFIX = "dispatch listening on "

# Policy's fields as flags (``--max-concurrent`` for ``max_concurrent``), each with its help; the defaults are Policy's.
POLICY_FLAGS = {
    "max_concurrent": "attempts of one queue in flight at once",
    "max_attempts": "attempts per delivery, the first included; 0 for unlimited",
    "max_retry_duration": "seconds from the first attempt during which retries go on past --max-attempts, as Cloud "
    "Tasks' max_retry_duration; 0 for attempts alone",
    "min_backoff": "seconds before the first retry",
    "max_backoff": "the longest wait between two attempts",
    "max_doublings": "times the wait doubles before it grows linearly",
    "deadline": "seconds one attempt is waited for, like dispatch_deadline",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(
        "python -m infra.fakes.dispatch",
        "Deliver tasks the Cloud Tasks emulator dispatches here to --target the way Cloud Tasks does: "
        "in parallel, with its headers, retried with backoff (loopback only).",
        port=DEFAULT_PORT,
    )
    parser.add_argument("--target", required=True, help="the URL tasks are delivered to (agent_session)")
    parser.add_argument(
        "--queue", default="default", help="queue name for a task that arrives without X-CloudTasks-QueueName"
    )
    defaults = Policy()
    for name, text in POLICY_FLAGS.items():
        default = getattr(defaults, name)
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=type(default), default=default, help=f"{text} (default: {default:g})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    policy = from_args(Policy, args)
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

"""Operator tools: list open questions and stuck sessions, and run the sweep by hand.

    python -m infra.admin list                 # open questions and stuck sessions, oldest first
    python -m infra.admin sweep [--now ISO]    # run the sweep on the local stack (the clock may be moved)

Against the local stack it reads ``.local/stack.json`` (or ``--stack-file``) to find the emulator and the
functions. Against a deployed project, run ``list`` with GOOGLE_CLOUD_PROJECT set and application default
credentials; ``sweep`` is then run with ``gcloud scheduler jobs run`` (see the README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from infra.stack import STACK_FILE

STUCK_AFTER = timedelta(minutes=15)


def _age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "?"
    minutes = int((now - then).total_seconds() // 60)
    return f"{minutes // 1440}d{minutes // 60 % 24:02d}h" if minutes >= 1440 else f"{minutes // 60}h{minutes % 60:02d}m"


def listing(now: datetime) -> list[str]:
    """Lines for a person: every open question, then every stuck session, with age, thread and status."""
    from shared import store
    from shared.models import SessionStatus

    far = now + timedelta(days=3650)
    lines = ["OPEN QUESTIONS (age, channel/thread, reminded, question)"]
    for q in store.stale_questions(far, page_size=200):
        reminded = "reminded" if q.reminded_at else "-"
        lines.append(
            f"  {_age(q.asked_at, now):>7}  {q.channel}/{q.thread_ts}  {reminded:8}  {q.text[:80]}  [{q.question_id}]"
        )
    lines.append("STUCK SESSIONS (age, channel/thread, status, why)")
    checks = [
        (SessionStatus.RUNNING, "lease_until", now, False, "lease expired: its worker may be dead"),
        (SessionStatus.SILENT_EXIT, "updated_at", far, True, "ended without reporting back; not yet followed up"),
        (SessionStatus.QUEUED, "updated_at", now - STUCK_AFTER, False, "queued for a while: no task ran it"),
        (SessionStatus.PAUSED, "updated_at", far, False, "waiting for an operator's answer"),
    ]
    for status, field, cutoff, followed, why in checks:
        for s in store.stale_sessions(status, field, cutoff, page_size=200, not_followed_up=followed):
            where = f"{s.channel}/{s.thread_ts}"
            lines.append(f"  {_age(s.created_at, now):>7}  {where}  {s.status.value:11}  {why}  [{s.session_id}]")
    return lines


def _use_stack(stack_file: Path) -> dict[str, Any]:
    """Point this process at the local stack's emulator, if one is running."""
    if not stack_file.exists():
        return {}
    info: dict[str, Any] = json.loads(stack_file.read_text())
    os.environ.update(info.get("env", {}))
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.admin", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["list", "sweep"])
    parser.add_argument("--stack-file", type=Path, default=STACK_FILE)
    parser.add_argument("--now", help="sweep as if it were this ISO time (local stack only)")
    args = parser.parse_args(argv)
    info = _use_stack(args.stack_file)
    if args.command == "list":
        from shared import store

        for line in listing(store.now()):
            print(line)
        return 0
    url = (info.get("functions") or {}).get("sweep")
    if not url:
        print(f"no local stack in {args.stack_file}: start one with `make stack` (or `make dev`)", file=sys.stderr)
        return 2
    body = json.dumps({"now": args.now} if args.now else {}).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - local stack URL
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - the local stack's own URL
        print(json.dumps(json.loads(response.read()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

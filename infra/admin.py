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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from infra.stack import STACK_FILE, live_stack

STUCK_AFTER = timedelta(minutes=15)


def _age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "?"
    minutes = int((now - then).total_seconds() // 60)
    return f"{minutes // 1440}d{minutes // 60 % 24:02d}h" if minutes >= 1440 else f"{minutes // 60}h{minutes % 60:02d}m"


def listing(now: datetime) -> list[str]:
    """Lines for a person: every open question, then every stuck session, with age, thread and status."""
    from shared.state import feedback, stale
    from shared.state.models import SessionStatus

    far = now + timedelta(days=3650)
    lines = ["OPEN QUESTIONS (age, channel/thread, reminded, question)"]
    for q in stale.stale_questions(far, page_size=200):
        reminded = "reminded" if q.reminded_at else "-"
        lines.append(
            f"  {_age(q.asked_at, now):>7}  {q.channel}/{q.thread_ts}  {reminded:8}  {q.text[:80]}  [{q.question_id}]"
        )
    lines.append("PENDING APPROVALS (age, channel/thread, tool, digest, requested by)")
    for a in stale.stale_approvals(far, page_size=200):
        lines.append(
            f"  {_age(a.asked_at, now):>7}  {a.channel}/{a.thread_ts}  {a.tool}  {a.digest}  <@{a.requested_by}>"
            f"  [{a.approval_id}]"
        )
    lines.append("DECISIONS, LAST 7 DAYS (when, decision, by, tool, digest, channel/thread)")
    for a in stale.decided_approvals(now - timedelta(days=7), limit=200):
        when = a.decided_at.isoformat(timespec="minutes") if a.decided_at else "?"
        reason = f"  reason: {a.reason[:60]}" if a.reason and a.status.value == "denied" else ""
        lines.append(f"  {when}  {a.status.value:8}  <@{a.decided_by}>  {a.tool}  {a.digest}  "
                     f"{a.channel}/{a.thread_ts}{reason}  [{a.approval_id}]")  # fmt: skip
    lines.append("FEEDBACK, LAST 7 DAYS (when, rating, by, channel/thread, session)")
    for f in feedback.since(now - timedelta(days=7), limit=200):
        mark = "👍" if f.rating == "positive" else "👎"
        lines.append(f"  {f.updated_at.isoformat(timespec='minutes')}  {mark}  <@{f.user}>  {f.channel}/{f.thread_ts}"
                     f"  [{f.session_id}]")  # fmt: skip
    lines.append("STUCK SESSIONS (age, channel/thread, status, why)")
    checks = [
        (SessionStatus.RUNNING, "lease_until", now, False, "lease expired: its worker may be dead"),
        (SessionStatus.SILENT_EXIT, "updated_at", far, True, "ended without reporting back; not yet followed up"),
        (SessionStatus.QUEUED, "updated_at", now - STUCK_AFTER, False, "queued for a while: no task ran it"),
        (SessionStatus.PAUSED, "updated_at", far, False, "waiting for an operator's answer"),
    ]
    for status, field, cutoff, followed, why in checks:
        for s in stale.stale_sessions(status, field, cutoff, page_size=200, not_followed_up=followed):
            where = f"{s.channel}/{s.thread_ts}"
            lines.append(f"  {_age(s.created_at, now):>7}  {where}  {s.status.value:11}  {why}  [{s.session_id}]")
    return lines


def usage(day: datetime) -> list[str]:
    """Tokens and an estimated cost for the sessions created on ``day`` (UTC): per session, user and channel."""
    from collections import Counter

    from shared import config
    from shared.state import stale

    prices = config.settings().token_prices
    kinds = ("prompt", "cached", "output", "thinking")
    by_user: dict[str, Counter[str]] = {}
    by_channel: dict[str, Counter[str]] = {}
    lines = [f"TOKENS ON {day:%Y-%m-%d} (session, user, channel, prompt, cached, output, thinking, est. USD)"]
    for s in stale.sessions_created(day, day + timedelta(days=1), page_size=200):
        spent = Counter({k: int(s.tokens.get(k, 0)) for k in kinds})
        by_user.setdefault(s.trigger_user, Counter()).update(spent)
        by_channel.setdefault(s.channel, Counter()).update(spent)
        lines.append(f"  {s.session_id}  {s.trigger_user}  {s.channel}  " + _tokens(spent, prices))
    for title, groups in (("PER USER", by_user), ("PER CHANNEL", by_channel)):
        lines.append(f"{title} (prompt, cached, output, thinking, est. USD)")
        lines += [f"  {who}  {_tokens(spent, prices)}" for who, spent in sorted(groups.items())]
    return lines


def _tokens(spent: Mapping[str, int], prices: Mapping[str, float]) -> str:
    """Token counts and their estimated cost; cached tokens are billed at the cached price, not the prompt one."""
    dollars = sum(prices.get(k, 0.0) * n for k, n in spent.items() if k != "prompt") / 1e6
    dollars += prices.get("prompt", 0.0) * max(0, spent.get("prompt", 0) - spent.get("cached", 0)) / 1e6
    counts = "  ".join(f"{spent.get(k, 0):>9,}" for k in ("prompt", "cached", "output", "thinking"))
    return f"{counts}  ${dollars:,.4f}"


def _use_stack(stack_file: Path) -> dict[str, Any]:
    """Point this process at the local stack's emulator, if one is running."""
    info = live_stack(stack_file)
    os.environ.update(info.get("env", {}))
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.admin", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["list", "sweep", "usage", "stop"])
    parser.add_argument("session", nargs="?", help="stop: the session whose tree to stop")
    parser.add_argument("--day", help="usage: the UTC day, YYYY-MM-DD (today by default)")
    parser.add_argument("--stack-file", type=Path, default=STACK_FILE)
    parser.add_argument("--now", help="sweep as if it were this ISO time (local stack only)")
    args = parser.parse_args(argv)
    info = _use_stack(args.stack_file)
    deployed = args.command != "sweep" and bool(os.environ.get("GOOGLE_CLOUD_PROJECT"))
    if not info and not deployed:
        print(
            f"no local stack in {args.stack_file}: start one with `make stack` (or `make dev`)"
            + ("" if args.command == "sweep" else ", or set GOOGLE_CLOUD_PROJECT for a deployed project"),
            file=sys.stderr,
        )
        return 2
    if args.command == "usage":
        day = datetime.fromisoformat(args.day).replace(tzinfo=UTC) if args.day else datetime.now(UTC)
        for line in usage(day.replace(hour=0, minute=0, second=0, microsecond=0)):
            print(line)
        return 0
    if args.command == "stop":
        if not args.session:
            parser.error("stop needs a session id (make admin lists them)")
        from shared.asks import stopping

        stopped = stopping.stop(args.session, by="an operator (make stop)")
        print(f"stopped (or asked to stop at their next step): {', '.join(stopped) or 'nothing: it had ended'}")
        return 0
    if args.command == "list":
        from shared.state import firestore

        for line in listing(firestore.now()):
            print(line)
        return 0
    url = (info.get("functions") or {}).get("sweep")
    if not url:
        print(f"the local stack in {args.stack_file} serves no sweep function", file=sys.stderr)
        return 2
    body = json.dumps({"now": args.now} if args.now else {}).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - local stack URL
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - the local stack's own URL
        print(json.dumps(json.loads(response.read()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

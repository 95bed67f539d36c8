"""Operator tools: list open questions and stuck sessions, and run the sweep by hand.

    python -m ops.admin list                 # open questions and stuck sessions, oldest first
    python -m ops.admin sweep [--now ISO]    # run the sweep on the local stack (the clock may be moved)

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
from typing import TYPE_CHECKING, Any

from ops.local_stack import STACK_FILE, live_stack
from ops.names import Names

if TYPE_CHECKING:
    from shared.state.session_model import Session

STUCK_AFTER = timedelta(minutes=15)


def _age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "?"
    minutes = int((now - then).total_seconds() // 60)
    return f"{minutes // 1440}d{minutes // 60 % 24:02d}h" if minutes >= 1440 else f"{minutes // 60}h{minutes % 60:02d}m"


def inert(text: str) -> str:
    """Text others wrote (a question the model wrote from a thread, an MCP server's request, a reason), for a
    terminal: every character that is not printable (an escape sequence could clear the screen, forge lines, set
    the clipboard or hide a link's target; a line break or a right-to-left override could reorder the listing)
    shown as its Python escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def waiting_for(session: Session) -> str:
    """What a paused session waits for, as a person says it."""
    from shared.state.models import WaitKind

    if session.awaited(WaitKind.APPROVAL):
        return "waiting for an approval"
    if session.awaited(WaitKind.QUESTION) or session.awaited(WaitKind.MCP_INPUT):
        return "waiting for an operator's answer"
    if session.awaited(WaitKind.CHILD):
        return "waiting for its delegated tasks"
    if session.parent_question is not None and session.parent_question.answer is None:
        return "waiting for its parent's answer"
    return "paused"


def listing(now: datetime, names: Names | None = None) -> list[str]:
    """Lines for a person: open questions, pending approvals, recent decisions and feedback, sessions that wait,
    and sessions that are stuck, each with its age, thread and people by name."""
    from shared import config
    from shared.state import feedback, stale
    from shared.state.models import SessionStatus

    names = names or Names()
    far = now + timedelta(days=3650)
    settings = config.settings()
    # A wait is bounded by the sweep (a reminder, then it gives up): a session paused longer than that is stuck.
    wait_bound = timedelta(hours=settings.question_remind_hours + settings.question_abandon_hours)
    lines = ["OPEN QUESTIONS (age, channel/thread, reminded, question)"]
    for q in stale.stale_questions(far, page_size=200):
        reminded = "reminded" if q.reminded_at else "-"
        lines.append(f"  {_age(q.asked_at, now):>7}  {q.channel}/{q.thread_ts}  {reminded:8}  "
                     f"{inert(names.readable(q.text)[:80])}  [{q.question_id}]")  # fmt: skip
    lines.append("PENDING APPROVALS (age, channel/thread, tool, digest, requested by)")
    for a in stale.stale_approvals(far, page_size=200):
        lines.append(f"  {_age(a.asked_at, now):>7}  {a.channel}/{a.thread_ts}  {a.tool}  {a.digest}  "
                     f"{names.name(a.requested_by)}  [{a.approval_id}]")  # fmt: skip
    lines.append("DECISIONS, LAST 7 DAYS (when, decision, by, tool, digest, channel/thread)")
    for a in stale.decided_approvals(now - timedelta(days=7), limit=200):
        when = a.decided_at.isoformat(timespec="minutes") if a.decided_at else "?"
        reason = f"  reason: {inert(names.readable(a.reason)[:60])}" if a.reason and a.status.value == "denied" else ""
        lines.append(f"  {when}  {a.status.value:8}  {names.name(a.decided_by)}  {a.tool}  {a.digest}  "
                     f"{a.channel}/{a.thread_ts}{reason}  [{a.approval_id}]")  # fmt: skip
    lines.append("FEEDBACK, LAST 7 DAYS (when, rating, by, channel/thread, session)")
    for f in feedback.since(now - timedelta(days=7), limit=200):
        mark = "👍" if f.rating == "positive" else "👎"
        lines.append(f"  {f.updated_at.isoformat(timespec='minutes')}  {mark}  {names.name(f.user)}  "
                     f"{f.channel}/{f.thread_ts}  [{f.session_id}]")  # fmt: skip
    paused = list(stale.stale_sessions(SessionStatus.PAUSED, "updated_at", far, page_size=200))
    lines.append("WAITING SESSIONS (age, channel/thread, for what)")
    for s in paused:
        if now - (s.updated_at or s.created_at) <= wait_bound:
            lines.append(f"  {_age(s.created_at, now):>7}  {s.origin.channel}/{s.origin.thread_ts}  {waiting_for(s)}  "
                         f"[{s.session_id}]")  # fmt: skip
    lines.append("STUCK SESSIONS (age, channel/thread, status, why)")
    checks = [
        (SessionStatus.RUNNING, "lease_until", now, False, "lease expired: its worker may be dead"),
        (SessionStatus.SILENT_EXIT, "updated_at", far, True, "ended without reporting back; not yet followed up"),
        (SessionStatus.QUEUED, "updated_at", now - STUCK_AFTER, False, "queued for a while: no task ran it"),
    ]
    stuck = [(s, why) for status, field, cutoff, followed, why in checks
             for s in stale.stale_sessions(status, field, cutoff, page_size=200, not_followed_up=followed)]  # fmt: skip
    stuck += [(s, f"{waiting_for(s)} for longer than the sweep allows a wait") for s in paused
              if now - (s.updated_at or s.created_at) > wait_bound]  # fmt: skip
    for s, why in stuck:
        where = f"{s.origin.channel}/{s.origin.thread_ts}"
        lines.append(f"  {_age(s.created_at, now):>7}  {where}  {s.status.value:11}  {why}  [{s.session_id}]")
    return lines


KINDS = ("prompt", "cached", "output", "thinking")


def usage(day: datetime, names: Names | None = None) -> list[str]:
    """Tokens and an estimated cost for the sessions created on ``day`` (UTC): per session, user and channel, in
    aligned columns however long an id is."""
    from collections import Counter

    from shared import config
    from shared.state import stale

    names = names or Names()
    prices = config.settings().token_prices
    by_user: dict[str, Counter[str]] = {}
    by_channel: dict[str, Counter[str]] = {}
    per_session: list[list[str]] = []
    for s in stale.sessions_created(day, day + timedelta(days=1), page_size=200):
        spent = Counter({k: int(s.limits.tokens.get(k, 0)) for k in KINDS})
        who = names.name(s.requester)
        by_user.setdefault(who, Counter()).update(spent)
        by_channel.setdefault(s.origin.channel, Counter()).update(spent)
        per_session.append([s.session_id, who, s.origin.channel, *_tokens(spent, prices)])
    numbers = [*KINDS, "est. USD"]
    lines = [f"TOKENS ON {day:%Y-%m-%d}"]
    lines += table(["session", "user", "channel", *numbers], per_session, right=len(numbers))
    for title, groups in (("user", by_user), ("channel", by_channel)):
        rows = [[who, *_tokens(spent, prices)] for who, spent in sorted(groups.items())]
        lines += ["", f"PER {title.upper()}", *table([title, *numbers], rows, right=len(numbers))]
    return lines


def table(header: list[str], rows: list[list[str]], *, right: int) -> list[str]:
    """Rows in columns as wide as their widest cell; the last ``right`` columns (numbers) aligned right."""
    if not rows:
        return ["  (none)"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    left = len(header) - right

    def line(row: list[str]) -> str:
        cells = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  " + "  ".join(cells).rstrip()

    return [line(header), *(line(row) for row in rows)]


def _tokens(spent: Mapping[str, int], prices: Mapping[str, float]) -> list[str]:
    """Token counts and their estimated cost; cached tokens are billed at the cached price, not the prompt one."""
    dollars = sum(prices.get(k, 0.0) * n for k, n in spent.items() if k != "prompt") / 1e6
    dollars += prices.get("prompt", 0.0) * max(0, spent.get("prompt", 0) - spent.get("cached", 0)) / 1e6
    return [f"{spent.get(k, 0):,}" for k in KINDS] + [f"${dollars:,.4f}"]


SWEEP_WORDS = {  # what each of the sweep's counters did, as a sentence fragment with {n} (and {s} for a plural)
    "reminded": "reminded the operators of {n} open question{s}",
    "abandoned": "gave up on {n} unanswered question{s}",
    "approvals_reminded": "reminded the operators of {n} pending approval{s}",
    "approvals_expired": "expired {n} approval{s} nobody decided",
    "narrated": "started a retry to report on {n} session{s} that ended silently",
    "escalated": "told the operators about {n} session{s} that ended silently again",
    "settled": "settled {n} session{s} whose worker had died",
    "requeued": "queued {n} waiting session{s} again",
    "children_failed": "failed {n} delegated task{s} whose parent had gone",
    "parents_reminded": "asked {n} session{s} again for the answer a delegated task waits for",
    "children_abandoned": "ended {n} delegated task{s} whose question to its parent went unanswered",
    "unwaited_resumed": "resumed {n} paused session{s} left waiting on nothing (every wait had ended)",
    "unwaited_ended": "ended {n} paused session{s} that nothing could resume any more",
}
SWEEP_READ = ("questions_read", "approvals_read", "sessions_read", "unchanged", "errors")


def sweep_sentences(summary: Mapping[str, Any]) -> list[str]:
    """The sweep's counters as plain sentences (a counter this does not know yet is still shown)."""

    def count(key: str) -> int:
        value = summary.get(key, 0)
        return value if isinstance(value, int) else 0

    def phrase(template: str, n: int) -> str:
        return template.format(n=n, s="" if n == 1 else "s")

    looked = (("questions_read", "open question"), ("approvals_read", "pending approval"), ("sessions_read", "session"))
    read = [phrase(f"{{n}} {what}{{s}}", count(key)) for key, what in looked]
    lines = [f"The sweep looked at {', '.join(read[:-1])} and {read[-1]}."]
    done = [phrase(template, count(key)) for key, template in SWEEP_WORDS.items() if count(key)]
    done += [f"{key.replace('_', ' ')}: {value}" for key, value in summary.items()
             if key not in SWEEP_WORDS and key not in SWEEP_READ and value]  # fmt: skip
    lines.append(f"It {'; '.join(done)}." if done else "Nothing needed doing.")
    if count("errors"):
        lines.append(f"{phrase('{n} of them failed', count('errors'))}: the sweep function's log says why.")
    return lines


def _use_stack(stack_file: Path) -> dict[str, Any]:
    """Point this process at the local stack's emulator, if one is running."""
    info = live_stack(stack_file)
    os.environ.update(info.get("env", {}))
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.admin", description=__doc__.splitlines()[0])
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
        from shared.state import sessions

        if sessions.get_session(args.session) is None:
            print(f"There is no session {args.session}: `make admin` lists the sessions that wait or are stuck.",
                  file=sys.stderr)  # fmt: skip
            return 1
        stopped = stopping.stop(args.session, by="an operator")  # people in Slack read this: no command names
        if not stopped:
            print(f"Session {args.session} had already ended: nothing to stop.")
            return 0
        print(f"Stopped {len(stopped)} session{'s' if len(stopped) > 1 else ''} (a running one ends after the step "
              f"it is on): {', '.join(stopped)}")  # fmt: skip
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
        summary = json.loads(response.read())
    for line in sweep_sentences(summary):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

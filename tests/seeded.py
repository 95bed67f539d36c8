"""Sessions written straight to Firestore as a crashed worker leaves them, for the tests of what takes them over."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Unpack

from infra.fakes.slack.client import FakeSlack
from shared.state import firestore
from shared.state.models import SessionKind, SessionStatus
from shared.state.session_model import Session, SessionUpdate
from tests.agent_helpers import HUMAN


def dead_worker_session(
    fake_slack: FakeSlack,
    session_id: str,
    channel: str,
    request: str,
    *,
    claimed_at: datetime,
    lease: timedelta,
    task: str = "t",
    **fields: Unpack[SessionUpdate],
) -> tuple[Session, datetime]:
    """A request message in ``channel`` (no mention: no session of its own) and a session for it that a worker
    (gone now) claimed at ``claimed_at`` for ``lease``: still ``running``. The session, and when it was written."""
    text = f"{request} [{channel}]"
    root = fake_slack.user_message(HUMAN, channel, text)["ts"]
    claimed: SessionUpdate = {"status": SessionStatus.RUNNING, "worker": "gone", "lease_task": task,
                              "lease_until": claimed_at + lease, "started_at": claimed_at}  # fmt: skip
    dead = Session.new(session_id=session_id, kind=SessionKind.MENTION, channel=channel, thread_ts=root,
                       trigger_ts=root, trigger_user=HUMAN, text=text, created_at=claimed_at,
                       **(claimed | fields))  # fmt: skip
    written: datetime = firestore.session_ref(dead.session_id).create(dead.to_doc()).update_time
    return dead, written

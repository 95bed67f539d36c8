"""A press of a final answer's 👍/👎: checked against the session it names, stored once, acknowledged ephemerally.

The button's value is only a claim: the press counts only on the message the session recorded as its final
answer, in its channel. A press anywhere else is refused and nothing is stored.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.actions import ButtonPress
from shared.state import feedback as stored
from shared.state import sessions

log = logging.getLogger(__name__)


class FeedbackOutcome(StrEnum):
    STORED = "stored"
    CHANGED = "changed"
    DUPLICATE = "duplicate"
    REFUSED = "refused"  # not a final answer's buttons


def press(pressed: ButtonPress) -> FeedbackOutcome:
    claimed = blocks.parse_feedback_value(pressed.value)
    session = sessions.get_session(claimed[0]) if claimed else None
    if claimed is None or session is None or session.origin.channel != pressed.channel or \
            not session.stream.answer_ts or session.stream.answer_ts != pressed.message_ts:  # fmt: skip
        slack.ephemeral(pressed.channel, pressed.user, "Feedback is taken on my final answers only.",
                        thread_ts=pressed.thread_ts)  # fmt: skip
        log.warning("feedback refused: not a final answer", extra={"value": pressed.value[:100]})
        return FeedbackOutcome.REFUSED
    session_id, rating = claimed
    recorded = stored.record(
        session_id, pressed.user, rating, channel=session.origin.channel, thread_ts=session.origin.thread_ts
    )
    outcome = {stored.Recorded.NEW: FeedbackOutcome.STORED, stored.Recorded.CHANGED: FeedbackOutcome.CHANGED,
               stored.Recorded.SAME: FeedbackOutcome.DUPLICATE}[recorded]  # fmt: skip
    if outcome != FeedbackOutcome.DUPLICATE:
        thanks = "Thanks: noted that this helped." if rating == "positive" else "Thanks: noted that this did not help."
        slack.ephemeral(pressed.channel, pressed.user, thanks, thread_ts=pressed.thread_ts)
    log.info("feedback", extra={"feedback_session": session_id, "rating": rating, "outcome": outcome.value})
    return outcome

"""The sweep's notices (a reminder, an abandoned question's, an alert that work went unreported): each posted at most
once, and posted eventually while Slack only refuses it for a while.

A notice is claimed first (``shared.state.notices``): two sweeps at once, or a sweep and Cloud Scheduler's retry of
it, post it once. What Slack answers decides what follows:

- posted: recorded, never posted again;
- refused, and Slack cannot have taken it (a 429, a 503, a connection that never reached Slack, an error code Slack
  gives before acting): kept pending, and the next sweep (or rescue) tries again, after Slack's ``Retry-After``;
- maybe taken (a 500 or a gateway's 502/504, ``fatal_error``, a read timeout or a cut connection; or a poster killed
  mid-post): kept pending, and the next attempt first looks for it in Slack by its key, posting only if it is not there;
- refused for good (the channel gone or archived, the app not in it, a message Slack will never take): given up and
  logged, never tried again; so is one still refused ``PATIENCE`` after its first attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

from slack_sdk.errors import SlackApiError

from shared.errors import Unavailable
from shared.slack import backpressure
from shared.slack import client as slack
from shared.state import events
from shared.state import notices as stored
from shared.state.firestore import now
from shared.state.notices import Claimed, Notice

log = logging.getLogger(__name__)

HOLD = events.CLAIM_HOLD  # how long a claim holds off another poster (longer than a post and its lookup take)
PATIENCE = timedelta(days=3)  # a notice Slack still refuses this long after its first attempt is given up
# Slack's answers that no later attempt would change: the place is gone or closed to the app, or the message itself
# is one Slack will not take.
GONE = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "cannot_reply_to_message",
    "restricted_action", "restricted_action_read_only_channel", "restricted_action_thread_only",
    "restricted_action_non_threadable_channel", "team_access_not_granted", "ekm_access_denied", "msg_too_long",
    "invalid_blocks", "no_text", "invalid_metadata_format", "invalid_metadata_schema", "metadata_too_large",
    "channel_type_not_supported",
})  # fmt: skip
# Error codes Slack gives after it may have acted ("some aspect of the operation succeeded").
MAYBE_DONE = frozenset({"fatal_error", "internal_error"})


class NotPosted(Unavailable):
    """A notice Slack refused this time: kept pending for the next sweep (``retried``), or given up."""

    def __init__(self, notice: Notice, error: str, *, retried: bool) -> None:
        super().__init__(f"notice {notice.claim} not posted ({'kept for the next sweep' if retried else 'given up'}):"
                         f" {error}")  # fmt: skip
        self.retried = retried


def post(notice: Notice, *, still_wanted: Callable[[], bool] | None = None) -> str | None:
    """Post ``notice`` unless it was posted (or is being posted) already; its ts, or None if this call did not post
    it. ``still_wanted``, asked once it is claimed: a reminder of an ask answered since is given up, never posted.
    Raises ``NotPosted`` when Slack refused it (kept for the next sweep, or given up: the error says which)."""
    claimed = stored.claim(notice, hold=HOLD)
    return None if claimed is None else deliver(notice, claimed, still_wanted=still_wanted)


def deliver(notice: Notice, claimed: Claimed, *, still_wanted: Callable[[], bool] | None = None) -> str | None:
    """Post ``notice``, claimed by this caller (``shared.state.notices.claim``): its ts, or None if it is no longer
    wanted; ``NotPosted`` if Slack refused it."""
    try:
        if still_wanted is not None and not still_wanted():
            stored.given_up(notice.claim, "no longer wanted")
            return None
        made = _found(notice, claimed) if claimed.look_first else None
        if made is None:
            made = slack.post(notice.channel, notice.thread_ts, notice.text, key=notice.key)
    except slack.POST_FAILURES as exc:  # (anything else, Firestore's or a bug: the hold passes, the next looks first)
        raise _refused(notice, claimed, exc) from exc
    stored.posted(notice.claim, made)
    return made


def _found(notice: Notice, claimed: Claimed) -> str | None:
    """The ts of the notice's post if an earlier attempt made it (killed after posting, or answered by an error after
    Slack took it), read from a little before that attempt."""
    oldest = f"{claimed.since.timestamp() - slack.SENT_MARGIN:.6f}"
    if notice.thread_ts:
        made = slack.posted_keys(notice.channel, notice.thread_ts, oldest=oldest).get(notice.key)
    else:
        made = slack.posted_keys_after(notice.channel, oldest).get(notice.key)
    if made is not None:
        log.warning("a notice an earlier attempt posted was found; not posted again", extra={"key": notice.key})
    return made


def _refused(notice: Notice, claimed: Claimed, exc: Exception) -> NotPosted:
    """Record what Slack's refusal means for the next attempt; the error to raise."""
    code = str(exc.response.get("error") or "") if isinstance(exc, SlackApiError) else ""
    error = code or repr(exc)
    if code in GONE or now() - claimed.since > PATIENCE:
        stored.given_up(notice.claim, error)
        log.error("a notice Slack will not take was given up", extra={"key": notice.key, "error": error})
        return NotPosted(notice, error, retried=False)
    maybe = backpressure.maybe_taken(exc) or code in MAYBE_DONE or claimed.look_first
    wait = backpressure.retry_after(exc.response) if isinstance(exc, SlackApiError) and _limited(exc) else 0.0
    stored.refused(notice.claim, error, maybe_posted=maybe, hold=HOLD, retry_in=timedelta(seconds=wait))
    log.warning("a notice Slack refused is kept for the next sweep",
                extra={"key": notice.key, "error": error, "maybe_posted": maybe, "retry_after": wait})  # fmt: skip
    return NotPosted(notice, error, retried=True)


def _limited(exc: SlackApiError) -> bool:
    return bool(exc.response.status_code == 429 or exc.response.get("error") == "ratelimited")


def pending(*, page_size: int) -> Iterator[Notice]:
    """The notices still owed, for the sweep to post again (``post``), by pages."""
    return stored.pending(page_size=page_size)


def give_up(notice: Notice, why: str) -> None:
    """A notice no longer owed (a reminder of an ask closed since): never posted."""
    stored.given_up(notice.claim, why)

"""Where a conversation's posts go (issue 26 item 6): a request typed at a DM's top level is answered there, in the
conversation; a reply inside a DM thread, and a mention anywhere, in its thread (tests/stack/test_dm_conversation.py
runs it end to end)."""

from __future__ import annotations

from shared.slack import placement


def test_only_a_request_typed_at_a_dms_top_level_is_answered_there() -> None:
    assert placement.reply_ts("D1", "1.000100", "1.000100") is None  # the DM itself
    assert placement.reply_ts("D1", "1.000100", "1.000200") == "1.000100"  # a reply inside a DM thread
    assert placement.reply_ts("C1", "1.000100", "1.000100") == "1.000100"  # a mention: its thread
    assert placement.reply_ts("D1", "1.000100", None) == "1.000100"  # no known request: the thread, as before

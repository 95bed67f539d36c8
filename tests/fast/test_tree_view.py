"""The tree status message's stored lines (``shared/state/tree_view.py``): which of two lines for one task a full
read of the tree keeps, what the view says ended children gave back, and the order the message lists them in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.asks.tree_status import in_tree_order
from shared.state.tree_view import Line, _newer, reserved

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def line(child: str, *, state: str = "working", at: datetime | None = T0, parent: str | None = None,
         seq: int = 1, index: int = 0) -> Line:  # fmt: skip
    return Line(child, parent, 2 if parent else 1, seq, index, f"task {child}", state, state == "done", at)


def test_a_line_read_from_a_later_version_replaces_one_that_shows_something_else() -> None:
    assert _newer(line("a", state="done", at=T0 + timedelta(seconds=1)), line("a", state="working"))


def test_a_line_read_before_the_stored_one_never_hides_it() -> None:
    # A full read that saw the task running, stored after the task's own end wrote "done".
    assert not _newer(line("a", state="working"), line("a", state="done", at=T0 + timedelta(seconds=1)))
    assert not _newer(line("a", state="working"), line("a", state="done"))  # the same version: the same line


def test_a_later_version_that_shows_the_same_is_not_written_again() -> None:
    assert not _newer(line("a", state="done", at=T0 + timedelta(seconds=5)), line("a", state="done"))


def test_a_task_without_a_stored_line_gets_one() -> None:
    assert _newer(line("a"), None)
    assert _newer(line("a"), line("a", at=None))


def test_children_follow_their_parent_and_siblings_their_calls() -> None:
    lines = [line("c2", index=1), line("g", parent="c1"), line("c1", index=0), line("c3", seq=3, index=0)]
    assert [x.child_id for x in in_tree_order(lines)] == ["c1", "g", "c2", "c3"]


def test_a_line_survives_its_document_round_trip() -> None:
    stored = line("a", state="done", parent="p", seq=4, index=2)
    assert Line.from_doc("a", stored.to_doc()) == stored


def test_the_budget_left_is_the_roots_allotments_less_what_the_view_says_was_given_back() -> None:
    root = {"tree_reserved": {"turns": 25, "tool_calls": 40}}
    assert reserved(root, {"returned": {"turns": 12, "tool_calls": 16}}) == {"turns": 13, "tool_calls": 24}
    assert reserved(root, None) == {"turns": 25, "tool_calls": 40}  # no child has ended: no view written yet

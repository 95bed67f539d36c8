"""The ids a click's transaction reads beside the question or approval it resolves (issue 28.1): the continuation
that would resume the asker's turn is named by the question's or approval's own id, so it is read in the same batch
instead of a round trip of its own. A hint only: a wrong one is read again, never trusted."""

from __future__ import annotations

from shared.state import ids


def test_a_question_or_an_approval_names_the_continuation_of_its_turn() -> None:
    asker = "ev-Ev123"
    assert ids.resume_hint(ids.question_id(asker, 3, 1)) == ids.resume_id(asker, 3)
    assert ids.resume_hint(ids.approval_id(asker, 7, 0)) == ids.resume_id(asker, 7)
    # the same continuation the answer's own path names
    assert ids.resume_hint(ids.question_id(asker, 3, 1)) == ids.resumed_by(ids.question_id(asker, 3, 1))


def test_a_continuation_that_asks_again_names_its_own_continuation() -> None:
    asker = ids.resume_id("ev-Ev123", 3)
    assert ids.resume_hint(ids.question_id(asker, 9, 0)) == ids.resume_id(asker, 9)


def test_a_later_round_of_a_servers_request_is_its_own_question_of_the_same_asker_and_turn() -> None:
    asker = "ev-Ev123"
    first, second = ids.question_id(asker, 3, 1), ids.question_id(asker, 3, 1, round=2)
    assert second != first
    assert ids.asker_of_question(second) == asker
    assert ids.resume_hint(second) == ids.resumed_by(second) == ids.resume_id(asker, 3)


def test_a_child_or_an_id_that_names_no_asker_has_no_hint() -> None:
    child = ids.child_id("ev-Ev123", 2, 0)  # a child is queued again as itself, never resumed in a continuation
    assert ids.resume_hint(ids.question_id(child, 4, 0)) is None
    assert ids.resume_hint(ids.approval_id(child, 4, 0)) is None
    assert ids.resume_hint("q-legacy") is None
    assert ids.resume_hint("parentq-ev-Ev123-1-0") is None
    assert ids.resume_hint("") is None

"""Slack's limit on a text input's initial value (3,000 characters): a call with a longer argument gets no Edit."""

from __future__ import annotations

from shared.slack import edit_modal

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "spec": {"type": "object"},
                                           "replicas": {"type": "integer"}}}  # fmt: skip


def test_arguments_within_the_limit_fit() -> None:
    assert edit_modal.fits(SCHEMA, {"name": "a" * edit_modal.TEXT_MAX, "replicas": 10**40, "spec": {"k": "v"}})


def test_a_string_a_json_field_or_the_undeclared_arguments_over_the_limit_do_not_fit() -> None:
    long = "a" * (edit_modal.TEXT_MAX + 1)
    assert not edit_modal.fits(SCHEMA, {"name": long})
    assert not edit_modal.fits(SCHEMA, {"spec": {"k": long}})
    assert not edit_modal.fits(SCHEMA, {"extra": long})

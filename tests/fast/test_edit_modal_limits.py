"""Slack's limit on a text input's initial value (3,000 characters): a call with a longer argument gets no Edit."""

from __future__ import annotations

from typing import Any

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


def _submitted_unchanged(view: dict[str, Any]) -> dict[str, Any]:
    """The ``state.values`` Slack sends when a modal is submitted with every field as it opened."""
    values: dict[str, Any] = {}
    for block in view["blocks"]:
        if block["type"] != "input":
            continue
        element = block["element"]
        state = {"type": element["type"]}
        if element["type"] == "static_select":
            state["selected_option"] = element.get("initial_option")
        else:
            state["value"] = element.get("initial_value")
        values[block["block_id"]] = {element["action_id"]: state}
    return values


def test_a_modal_submitted_unchanged_gives_back_every_argument_as_it_was() -> None:
    """Defect: a value its field could not show (``null``, or a value of another type than the schema's: a number
    for a string, a string for an integer, a value its enum does not list) opened as an empty field, so that the
    modal submitted unchanged dropped or changed the argument: an "edit" nobody made, the model told of it."""
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "replicas": {"type": "integer"}, "ratio": {"type": "number"},
        "force": {"type": "boolean"}, "mode": {"type": "string", "enum": ["a", "b"]}, "tags": {"type": "array"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}, "retries": {"type": "integer"},
    }}  # fmt: skip
    valid: list[dict[str, Any]] = [
        {"name": "api", "replicas": 3, "ratio": 0.5, "force": True, "mode": "b", "tags": ["x"], "note": "n"},
        {"name": "api", "note": None},  # null, as its schema allows
    ]
    for args in valid:
        view = edit_modal.view("a-1|d1", "t", schema=schema, args=args, order=list(args)).to_dict()
        assert edit_modal.parse(schema, _submitted_unchanged(view)) == (args, {}), args
    # Values the schema refuses: shown as they are, so the submission is refused (never changed without a word).
    invalid: list[dict[str, Any]] = [
        {"name": None, "replicas": None, "force": None, "mode": None, "tags": None},
        {"name": 5, "replicas": "3", "ratio": "half", "force": "yes", "mode": "c", "tags": "x"},
    ]
    for args in invalid:
        view = edit_modal.view("a-1|d1", "t", schema=schema, args=args, order=list(args)).to_dict()
        parsed, errors = edit_modal.parse(schema, _submitted_unchanged(view))
        assert parsed == args, args
        assert set(errors) == {f"arg:{name}" for name in args}, errors


def test_a_bad_value_among_the_undeclared_arguments_is_named_under_their_field() -> None:
    """Defect: an error in the arguments the schema does not name (their one JSON field, ``*others``) was shown under
    the modal's first field, which held nothing wrong."""

    def typed(name: str, others: str) -> dict[str, Any]:
        return {"arg:name": {"value": {"type": "plain_text_input", "value": name}},
                "arg:*others": {"value": {"type": "plain_text_input", "value": others}}}  # fmt: skip

    closed = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}
    assert list(edit_modal.parse(closed, typed("api", '{"extra": 1}'))[1]) == ["arg:*others"]
    numbers = {**closed, "additionalProperties": {"type": "integer"}}
    bad = edit_modal.parse(numbers, typed("api", '{"extra": "x"}'))[1]
    assert bad == {"arg:*others": "'x' is not of type 'integer'"}
    assert edit_modal.parse(numbers, typed("api", '{"extra": 2}')) == ({"name": "api", "extra": 2}, {})


def test_a_schema_of_more_fields_than_a_modal_holds_or_a_name_longer_than_a_block_id_does_not_fit() -> None:
    """Defect: Slack refuses a modal of more than 100 blocks, or a block id over 255 characters (invalid_arguments at
    views.open); such a tool's calls were offered Edit, and each press told the operator to press Edit again."""
    many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(99)}}
    assert edit_modal.fits(many, {})  # the sentence, then 99 fields: 100 blocks
    assert not edit_modal.fits(many, {"extra": 1})  # and the field of undeclared arguments: 101
    more = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(100)}}
    assert not edit_modal.fits(more, {})
    assert edit_modal.fits({"properties": {"n" * 251: {"type": "string"}}}, {})  # "arg:" and 251: 255
    assert not edit_modal.fits({"properties": {"n" * 252: {"type": "string"}}}, {})

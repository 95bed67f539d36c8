"""The Edit modal's sealed ``private_metadata`` (it reads back only as sealed, under the key it was sealed with), and
its check of a submission's argument names."""

from __future__ import annotations

from shared.slack.edit_modal import Ticket, parse, seal, unseal, view

KEY = "signing-secret"
TICKET = Ticket("a-s-1-0", "0123456789abcdef", 2, "U0OPERATOR")


def test_a_sealed_ticket_reads_back_whole() -> None:
    assert unseal(seal(TICKET, KEY), KEY) == TICKET


def test_anything_not_sealed_here_reads_as_no_ticket() -> None:
    sealed = seal(TICKET, KEY)
    body, _, mac = sealed.rpartition("|")
    forged = [
        "a-s-1-0|0123456789abcdef",  # the old, unsealed form
        sealed.replace("a-s-1-0", "a-s-1-1"),  # another approval
        sealed.replace("|2|", "|3|"),  # another revision of the call
        sealed.replace("U0OPERATOR", "U0OTHER"),  # another opener
        seal(TICKET, "another key"),
        f"{body}|{mac[:-1]}é",  # not even ASCII
        "",
        "|||||",
    ]
    assert [unseal(text, KEY) for text in forged] == [None] * len(forged)


def test_an_edit_naming_an_argument_the_schema_does_not_is_refused_unless_it_allows_others() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    values = {"arg:name": {"value": {"type": "plain_text_input", "value": "api"}},
              "arg:*others": {"value": {"type": "plain_text_input", "value": '{"force": true}'}}}  # fmt: skip
    args, errors = parse(schema, values)
    assert args == {"name": "api", "force": True}
    assert "'force'" in errors["arg:*others"]
    assert parse({**schema, "additionalProperties": True}, values)[1] == {}


def test_the_modal_shows_characters_a_text_field_would_hide_as_escapes_and_reads_them_back() -> None:
    """Defect: the card shows a right-to-left override or a zero-width space as an escape, but the Edit modal put the
    value in a text field as it is, where it reorders or vanishes; submitted, the call ran with it. Such a value is
    now a JSON field with the escapes, read back to the very value; a line break still shows as a line break."""
    schema = {"type": "object", "properties": {"repo": {"type": "string"}, "note": {"type": "string"},
                                               "tags": {"type": "array"}}}  # fmt: skip
    args = {"repo": "prod\u202eatsgni", "note": "two\nlines", "tags": ["a\u200bb"]}
    shown = view("a-1|d1", "t", schema=schema, args=args, order=list(args)).to_dict()
    fields = {b["block_id"]: b["element"] for b in shown["blocks"] if b["type"] == "input"}
    assert fields["arg:repo"]["initial_value"] == '"prod\\u202eatsgni"'
    assert fields["arg:note"]["initial_value"] == "two\nlines"
    assert "\\u200b" in fields["arg:tags"]["initial_value"]
    assert all("\u202e" not in f["initial_value"] and "\u200b" not in f["initial_value"] for f in fields.values())
    state = {b: {e["action_id"]: {"type": e["type"], "value": e["initial_value"]}} for b, e in fields.items()}
    assert parse(schema, state) == (args, {})


def test_the_field_of_the_others_cannot_override_an_argument_that_has_its_own_field() -> None:
    """Defect: the JSON field for undeclared arguments was merged over the declared ones, so ``{"replicas": 50}``
    typed there ran 50 while the replicas field above still showed 3."""
    schema = {"type": "object", "properties": {"replicas": {"type": "integer"}}, "additionalProperties": True}
    values = {"arg:replicas": {"value": {"type": "number_input", "value": "3"}},
              "arg:*others": {"value": {"type": "plain_text_input", "value": '{"replicas": 50}'}}}  # fmt: skip
    assert "'replicas'" in parse(schema, values)[1]["arg:*others"]

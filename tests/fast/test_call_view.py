"""The approval card's call, rendered (pure): every character, inertly, the arguments that matter first."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent.tools import describe
from shared.agent.tools.toolset import all_tools
from shared.asks.approvals import canonical, digest
from shared.slack import approval_card, call_view

SCHEMA = {"properties": {"repo": {}, "branch": {}, "force": {}}, "required": ["repo", "branch"]}


def parsed(shown: str) -> Any:
    """What the card's call text says, as JSON (its first line is the tool's name)."""
    return json.loads(shown.split("\n", 1)[1])


def test_a_padding_argument_cannot_push_the_one_that_matters_off_the_card() -> None:
    """The review: ``aaa_padding`` sorts before ``repo``; the card folded at 1,500 characters, and the branch was
    deleted in ``prod-infra``, which it never showed."""
    args = {"aaa_padding": "x" * 5_000, "branch": "main", "repo": "prod-infra"}
    shown = call_view.shown_call("delete_branch", args, call_view.order(args, SCHEMA))
    assert shown.splitlines()[1:4] == ["{", '  "repo": "prod-infra",', '  "branch": "main",']  # required first
    assert parsed(shown) == args  # every character
    pieces = call_view.chunks(shown)
    assert "".join(pieces) == shown
    assert all(len(p.encode("utf-16-le")) // 2 <= 3000 for p in pieces)


@pytest.mark.parametrize(
    "value",
    [
        "``` then *bold* and <https://evil.example|the docs> for <@U0BOSS> and <!channel> @here :rocket:",
        "ok\u202e\u2066gpj.exe\u200b\u2060\ufeff\u00a0\u3164\ufe0f\U000e0041\x07\n\ttail",
    ],
)
def test_markup_and_invisible_characters_are_shown_as_escapes_and_nothing_else_changes(value: str) -> None:
    shown = call_view.shown_call("t", {"note": value})
    assert parsed(shown) == {"note": value}
    assert not any(c in shown for c in "<>&\u202e\u2066\u200b\u2060\ufeff\u00a0\u3164\ufe0f\x07\t")
    assert "@here" not in shown  # the neutraliser would change it on the way: it is written \u0040here
    for escape in ("\\u003c", "\\u202e", "\\u2066", "\\u200b", "\\u3164", "\\udb40\\udc41"):
        assert escape in shown or escape not in json.dumps(value)


def test_a_call_over_the_limit_is_not_presentable() -> None:
    small = call_view.shown_call("t", {"a": "x" * 11_000})
    large = call_view.shown_call("t", {"a": "x" * 12_001})
    assert call_view.presentable(small)
    assert not call_view.presentable(large)
    assert "too large to present" in call_view.too_large_error("t", len(large))


def test_chunks_never_cut_inside_an_escape() -> None:
    text = "a" * 2_895 + "\\u202e" + "b" * 10
    pieces = call_view.chunks(text)
    assert pieces[0] == "a" * 2_895
    assert pieces[1].startswith("\\u202e")


def test_a_tool_describes_its_call_in_one_inert_sentence() -> None:
    tools = {t.name: t for t in all_tools()}
    assert describe.summary(tools["restart_service"], {"name": "billing", "environment": "staging"}) == (
        "Restart `billing` in `staging`"
    )
    forged = describe.summary(tools["restart_service"], {"name": "x` *now* <!here>\u202e", "environment": "p"})
    assert "<" not in forged
    assert "\u202e" not in forged
    assert forged.count("`") == 4  # the value's backtick cannot end its code span
    # A tool without a sentence of its own: its name and its required arguments.
    assert describe.summary(tools["fetch_url"], {"url": "https://e.example/"}) == (
        "Run `fetch_url` with url `https://e.example/`"
    )


def test_argument_names_the_model_chose_form_no_markup_in_the_sentence() -> None:
    """Defect: a tool without required arguments (an MCP server's, or ``read_thread``) named the model's own
    arguments in the card's mrkdwn sentence as they were: a name like ``*approve now*`` was bold, ``_x_`` italic, a
    backtick broke the value's code span and a URL was a link. Such a name is now inert inline code."""
    tools = {t.name: t for t in all_tools()}
    args = {"*approve now*": 1, "_x_": 2, "`c": 3, "https://evil.example/": 4}
    assert describe.summary(tools["read_thread"], args) == (
        f"Run `read_thread` with `*approve now*` `1`, `_x_` `2`, `{call_view.GRAVE}c` `3`, 1 more argument"
    )
    assert describe.summary(tools["read_thread"], {"limit": 5}) == "Run `read_thread` with limit `5`"


def test_the_card_opens_with_the_sentence_who_asked_and_the_expiry_and_shows_the_whole_call() -> None:
    args = {"environment": "staging", "name": "billing"}
    card = approval_card.Card(
        approval_id="a-1", tool="restart_service", args=canonical(args), digest=digest("restart_service",
        canonical(args)), summary="Restart `billing` in `staging`", shown_order=["name", "environment"],
        requested_by="U0ASKER", expires_at=datetime(2030, 1, 4, 9, 30, tzinfo=UTC), operators=frozenset({"U0OPS"}),
    )  # fmt: skip
    shown = [b.to_dict() for b in approval_card.blocks(card)]
    header = shown[0]["text"]["text"]
    assert header.startswith(":lock: *Restart `billing` in `staging`*")
    assert "Asked by <@U0ASKER>" in header
    assert "expires Fri 04 Jan 09:30 UTC" in header
    assert shown[1]["text"] == {
        "type": "plain_text", "emoji": False,
        "text": 'restart_service\n{\n  "name": "billing",\n  "environment": "staging"\n}',
    }  # fmt: skip
    assert shown[-1]["type"] == "actions"
    two = approval_card.Card(**{**card.__dict__, "approvals_needed": 2, "approved_by": ["U0ONE"]})
    assert "*1 of 2 approvals*: approved by <@U0ONE>" in approval_card.blocks(two)[0].to_dict()["text"]["text"]


def test_the_edit_modal_has_a_field_per_argument_and_checks_a_submission_against_the_schema() -> None:
    from shared.slack import edit_modal

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"}, "replicas": {"type": "integer", "maximum": 50},
            "mode": {"type": "string", "enum": ["rolling", "all"]}, "dry_run": {"type": "boolean"},
            "labels": {"type": "object"},
        },
        "required": ["name", "replicas"],
    }  # fmt: skip
    args = {"name": "api", "replicas": 3, "labels": {"a": "b"}, "stray": 1}
    shown = edit_modal.view("a-1|d1", "scale", schema=schema, args=args, order=["name", "replicas"]).to_dict()
    fields = {b["block_id"]: b for b in shown["blocks"] if b["type"] == "input"}
    assert list(fields) == ["arg:name", "arg:replicas", "arg:mode", "arg:dry_run", "arg:labels", "arg:*others"]
    assert fields["arg:replicas"]["element"]["type"] == "number_input"
    assert fields["arg:mode"]["element"]["type"] == "static_select"
    assert json.loads(fields["arg:labels"]["element"]["initial_value"]) == {"a": "b"}
    assert (fields["arg:name"]["optional"], fields["arg:mode"]["optional"]) == (False, True)
    assert shown["private_metadata"] == "a-1|d1"

    def state(**typed: str) -> dict[str, Any]:
        return {f"arg:{k}": {"value": {"type": "plain_text_input", "value": v}} for k, v in typed.items()}

    edited, errors = edit_modal.parse(schema, state(name="web", replicas="7", labels='{"x": 1}'))
    assert (edited, errors) == ({"name": "web", "replicas": 7, "labels": {"x": 1}}, {})
    assert edit_modal.parse(schema, state(name="web", replicas="70"))[1] == {
        "arg:replicas": "70 is greater than the maximum of 50"
    }
    assert "arg:replicas" in edit_modal.parse(schema, state(name="web", replicas="2.5"))[1]
    assert "arg:labels" in edit_modal.parse(schema, state(name="web", replicas="1", labels="{nope"))[1]
    assert edit_modal.parse(schema, state(replicas="1"))[1] == {"arg:name": "'name' is a required property"}


def test_an_edit_is_checked_without_fetching_a_remote_reference_in_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: a ``$ref`` naming a URL (an MCP server declares the schema) made jsonschema fetch it from the Slack
    ingress when an operator submitted an edit. It now resolves within the schema only."""
    from shared.slack import edit_modal

    fetched: list[str] = []

    def no_fetch(url: object, *args: object, **kwargs: object) -> object:
        fetched.append(str(url))
        raise OSError("no network in this test")

    monkeypatch.setattr(urllib.request, "urlopen", no_fetch)
    remote = "http://169.254.169.254/schema.json"
    schema = {"type": "object", "properties": {"key": {"$ref": remote}, "n": {"$ref": "#/$defs/n"}},
              "$defs": {"n": {"type": "integer"}}}  # fmt: skip
    state = {"arg:key": {"value": {"type": "plain_text_input", "value": '"k"'}}}
    errors = edit_modal.parse(schema, state)[1]
    assert fetched == []
    assert errors == {
        "arg:key": "The tool's schema refers to 'http://169.254.169.254/schema.json', which is not fetched"
    }
    only_local = {"arg:n": {"value": {"type": "plain_text_input", "value": '"x"'}}}
    assert edit_modal.parse(schema, only_local)[1] == {"arg:n": "'x' is not of type 'integer'"}


def test_after_an_edit_the_cards_sentence_no_longer_describes_the_arguments_the_model_asked_for() -> None:
    """Defect: the card's sentence (its header, its notification and its reminder) was the tool's sentence for the
    model's arguments, kept after an operator's edit: "Scale `api` to 3 replicas" above an edited call of 50, which a
    second approver was asked to approve."""
    asked, edited = {"name": "api", "replicas": 3}, {"name": "api", "replicas": 50}
    card = approval_card.Card(
        approval_id="a-1", tool="scale_service", args=canonical(asked),
        digest=digest("scale_service", canonical(asked)), summary="Scale `api` to `3` replicas", approvals_needed=2,
        approved_by=["U0EDITOR"], edited_args=canonical(edited), edited_by="U0EDITOR",
        edited_digest=digest("scale_service", canonical(edited)),
    )  # fmt: skip
    header = approval_card.blocks(card)[0].to_dict()["text"]["text"]
    for shown in (header, approval_card.text(card), approval_card.decided_text(card, "denied")):
        assert "`3`" not in shown, shown
        assert "<@U0EDITOR> edited" in shown, shown

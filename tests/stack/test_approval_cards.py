"""What an approval card shows, on the real stack (issue 25.1): the review's calls, and a call too large to show."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks, call_view
from shared.state import approvals as stored
from shared.state import firestore, ids
from shared.state.models import SessionStatus, WaitKind
from tests.agent_helpers import function_responses, mention, wait_status
from tests.stack.test_approvals import asks_approval, executions, press, resumed, shown_call

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def card_for(script: Script, fake_slack: FakeSlack, uid: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    script(G.call("scale_service", **args), G.text("Done."))
    thread = mention(fake_slack, f"C{uid}", "scale it")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    card = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert json.loads(approval.args) == args  # the digest binds exactly these
    return card, approval.digest


def every_text(message: dict[str, Any]) -> str:
    return json.dumps({"text": message["text"], "blocks": message.get("blocks")}, ensure_ascii=False)


def test_the_padding_argument_cannot_hide_the_one_that_matters(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    """The review: a long padding argument sorted first and the card folded at 1,500 characters."""
    args = {"aaa_padding": "x" * 5_000, "name": "prod-infra", "replicas": 0}
    card, digest = card_for(script, fake_slack, uid, args)
    shown = shown_call(card)
    assert shown.splitlines()[2:4] == ['  "name": "prod-infra",', '  "replicas": 0,']  # required first, schema order
    assert json.loads(shown.split("\n", 1)[1]) == args  # every character
    assert len([b for b in card["blocks"] if b["type"] == "section"]) >= 3  # the sentence, then the call in 2+
    assert digest in every_text(card)


def test_a_fence_links_and_mentions_in_an_argument_form_nothing(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """The review: a value's ``` closed the card's code fence, and ``<url|label>`` became a link."""
    name = "api```\n*approved* <https://evil.example|the runbook> <@U0BOSS> <!here> :white_check_mark:"
    card, _ = card_for(script, fake_slack, uid, {"name": name, "replicas": 3})
    shown = shown_call(card)
    assert json.loads(shown.split("\n", 1)[1]) == {"name": name, "replicas": 3}
    assert "<" not in shown
    assert ">" not in shown
    # The sentence above it quotes the value as inline code that nothing can leave: no link, mention or fence.
    mrkdwn = [b["text"]["text"] for b in card["blocks"] if b.get("text", {}).get("type") == "mrkdwn"]
    for text in [*mrkdwn, card["text"]]:
        assert not any(token in text for token in ("<https", "<@U0BOSS", "<!here", "```"))


def test_bidi_and_invisible_characters_are_shown_as_escapes(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    """The review: a right-to-left override reached the card as itself and reversed what people read."""
    name = "api\u202e\u2066noitcudorp\u200b"
    card, _ = card_for(script, fake_slack, uid, {"name": name, "replicas": 3})
    everything = every_text(card)
    assert not any(c in everything for c in "\u202e\u2066\u200b")
    assert "\\u202e\\u2066noitcudorp\\u200b" in shown_call(card)
    assert json.loads(shown_call(card).split("\n", 1)[1])["name"] == name


def test_a_call_too_large_to_show_is_never_posted_and_the_model_is_told(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=3, note="n" * 13_000), G.text("I will make it smaller."))
    thread = mention(fake_slack, f"C{uid}", "scale it with a long note")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    assert done.awaited(WaitKind.APPROVAL) == []
    assert not [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "approval needed" in m["text"]]
    approvals = (
        firestore.db().collection("approvals").where(filter=FieldFilter("session_id", "==", thread.session_id)).get()
    )
    assert list(approvals) == []
    assert executions(thread.session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    error = response["response"]["error"]
    assert "too large to present" in error
    assert "make a smaller call" in error.lower()


def test_a_call_exactly_as_long_as_can_be_shown_is_shown_whole_and_runs_and_one_more_character_is_refused(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The limit is on the text the card shows (escapes counted as shown, UTF-16 pairs as one character)."""
    head = "x\u202e\u200b\U0001f600"  # escaped to 12 characters, and one drawn as two UTF-16 units
    padding = call_view.MAX_SHOWN_CHARS - len(call_view.shown_call("scale_service", {"name": head, "replicas": 3}))
    name = head + "a" * padding
    at_limit: dict[str, Any] = {"name": name, "replicas": 3}
    assert len(call_view.shown_call("scale_service", at_limit, ["name", "replicas"])) == call_view.MAX_SHOWN_CHARS
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "scale it", G.call("scale_service", **at_limit),
                                     "Scaled.")  # fmt: skip
    card = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    shown = shown_call(card)
    assert len(shown) == call_view.MAX_SHOWN_CHARS
    assert json.loads(shown.split("\n", 1)[1]) == at_limit
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["service"] for e in executions(thread.session_id)] == [name]

    script(G.call("scale_service", name=name + "a", replicas=3), G.text("Smaller, then."))
    over = mention(fake_slack, f"C{uid}b", "scale it, one character more")
    wait_status(over.session_id, SessionStatus.DONE, timeout=60)
    assert not [m for m in fake_slack.bot_replies(over.channel, over.ts) if "approval needed" in m["text"]]
    [response] = function_responses(fake_gemini.requests()[-1])
    assert f"({call_view.MAX_SHOWN_CHARS + 1} characters shown" in response["response"]["error"]


def test_a_childs_task_on_its_card_forms_no_lines_markup_or_reordering(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a delegated child's card quoted its task (model text, shaped by the thread) as mrkdwn with only
    ``<>&`` escaped: a line break, ``*bold*`` and a right-to-left override in it drew a line of their own on the
    card, such as an approval that never happened."""
    task = f"tidy {uid}\n\n*Approved by the on-call lead* `ok`\u202e"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
    child = json.dumps({"task": f"tidy {uid}"})[:-2]  # its opening holds the task as JSON (escaped as it escapes)
    fake_gemini.script(*(G.matching(child, item) for item in (G.call("scale_service", name="api", replicas=2),
                                                                G.text("Scaled."))))  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("Done.")))
    thread = mention(fake_slack, f"C{uid}", "tidy up")
    paused = wait_status(ids.child_id(thread.session_id, 1, 0), SessionStatus.PAUSED, timeout=60)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    card = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    header = card["blocks"][0]["text"]["text"]
    assert len(header.splitlines()) == 2  # the sentence, then who asked, the expiry and who decides
    for shown in (header, card["text"]):
        assert "\u202e" not in shown
        assert "\\u202e" in shown
        assert f"`for a delegated task: tidy {uid}  *Approved by the on-call lead* \u02cbok\u02cb" in shown  # code

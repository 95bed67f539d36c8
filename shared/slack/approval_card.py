"""The approval card: one plain sentence of what will happen, who asked, when it expires, who may decide, then the
exact call (``call_view``: every character, inertly), then the buttons bound to the call's digest.

Pure builders: the card is a function of what the approval record stores, so any entry point can draw it again
(a decision, a second approver, the sweep) without the tool that asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from shared.slack import call_view
from shared.slack.blocks import APPROVE_ACTION, DENY_ACTION, approval_value, escaped, operator_mentions

EDIT_ACTION = "approval_edit"


@dataclass(frozen=True)
class Card:
    """What a card shows, as the approval record holds it."""

    approval_id: str
    tool: str
    args: str  # canonical JSON
    digest: str
    summary: str | None = None  # inert mrkdwn
    shown_order: list[str] = field(default_factory=list)
    requested_by: str | None = None
    label: str | None = None
    expires_at: datetime | None = None
    approvers: list[str] = field(default_factory=list)  # empty: the operators
    approvals_needed: int = 1
    approved_by: list[str] = field(default_factory=list)
    operators: frozenset[str] = frozenset()
    editable: bool = False
    edited_args: str | None = None  # canonical JSON of an operator's edit, which runs instead
    edited_by: str | None = None
    edited_digest: str | None = None
    asked_in: str | None = None  # a link to the conversation, when the card is in the operator channel

    @property
    def runs_digest(self) -> str:
        """The digest of the call that runs: the edit's, once there is one."""
        return self.edited_digest or self.digest


def sentence(card: Card) -> str:
    """What the call will do, in one sentence. The tool's sentence names the arguments the model asked for, so after
    an edit it would describe a call that does not run (a second approver, the reminder): the card then names the
    editor and points at the edited call instead."""
    if card.edited_args is not None:
        return f"Run `{escaped(card.tool)}` with the arguments <@{card.edited_by}> edited (the call that runs, below)"
    return card.summary or f"Run `{escaped(card.tool)}`"


def who_decides(card: Card) -> str:
    """The people who may decide, as mentions (a user group by its id: Slack's group mention would ping it)."""
    if not card.approvers:
        return operator_mentions(card.operators) if card.operators else "the operators"
    return ", ".join(f"<@{a}>" if not a.startswith("S") else f"members of user group `{a}`" for a in card.approvers)


def progress(card: Card) -> str:
    """ "1 of 2" while more approvers are needed; empty for a single approval."""
    if card.approvals_needed <= 1:
        return ""
    done = len(card.approved_by)
    by = f": approved by {', '.join(f'<@{u}>' for u in card.approved_by)}" if card.approved_by else ""
    return f"*{done} of {card.approvals_needed} approvals*{by}"


LABEL_CHARS = 200


def _label(card: Card) -> str:
    """Who asks, as inline code: a child's label quotes its task (model text), which may form no line or markup."""
    return call_view.inline(card.label or "", LABEL_CHARS)


def _when(at: datetime) -> str:
    return at.strftime("%a %d %b %H:%M UTC")


def call_text(card: Card) -> str:
    return call_view.shown_call(card.tool, json.loads(card.args), card.shown_order)


def _sections(text: str) -> list[Any]:
    return [SectionBlock(text=PlainTextObject(text=piece, emoji=False)) for piece in call_view.chunks(text)]


def _call_sections(card: Card) -> list[Any]:
    """The call; after an edit, the original (which will not run) and then the edited call (which runs)."""
    if card.edited_args is None:
        return _sections(call_text(card))
    edited = call_view.shown_call(card.tool, json.loads(card.edited_args), card.shown_order)
    return [
        ContextBlock(elements=[MarkdownTextObject(text="The call as the model asked for it (it does not run):")]),
        *_sections(call_text(card)),
        SectionBlock(text=MarkdownTextObject(text=f":pencil2: *Edited by <@{card.edited_by}>; this call runs:*")),
        *_sections(edited),
    ]


def _header(card: Card) -> list[Any]:
    about = f" — {_label(card)}" if card.label else ""
    asked = f"Asked by <@{card.requested_by}>" if card.requested_by else "Asked by the session"
    facts = [asked + (f" in {card.asked_in}" if card.asked_in else "")]
    if card.expires_at is not None:
        facts.append(f"expires {_when(card.expires_at)}")
    facts.append(f"who may decide: {who_decides(card)}")
    lines = [f":lock: *{sentence(card)}*{about}", " · ".join(facts)]
    if progress(card):
        lines.append(progress(card))
    return [SectionBlock(text=MarkdownTextObject(text="\n".join(lines)))]


def _footer(card: Card, note: str) -> Any:
    text = f"The exact call above runs · digest `{card.runs_digest}`{note}"
    return ContextBlock(elements=[MarkdownTextObject(text=text)])


def blocks(card: Card) -> list[Any]:
    """A pending card: the sentence and its facts, the exact call, the buttons bound to its digest."""
    value = approval_value(card.approval_id, card.runs_digest)
    buttons = [
        ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=value, style="primary"),
        ButtonElement(text="Deny", action_id=DENY_ACTION, value=value, style="danger"),
    ]
    if card.editable:
        buttons.append(ButtonElement(text="Edit", action_id=EDIT_ACTION, value=value))
    return [
        *_header(card),
        *_call_sections(card),
        _footer(card, " · reply in this thread to deny it with a reason"),
        ActionsBlock(block_id=f"approval:{card.approval_id}", elements=buttons),
    ]


def text(card: Card) -> str:
    """The card's notification text (and where blocks do not render): the sentence, never the raw call."""
    asked = f" for <@{card.requested_by}>'s request" if card.requested_by else ""
    about = f" ({_label(card)})" if card.label else ""
    return (
        f":lock: {who_decides(card)}: approval needed{asked}{about}: {sentence(card)}. The card shows the exact call."
    )


def decided_blocks(card: Card, verdict: str, *, result: str | None = None) -> list[Any]:
    """A decided card: the verdict under the sentence, the exact call still shown, no buttons; ``result`` (inert
    plain text) once it ran."""
    shown: list[Any] = [
        *_header(card),
        SectionBlock(text=MarkdownTextObject(text=verdict)),
        *_call_sections(card),
    ]
    if result is not None:
        shown.append(SectionBlock(text=PlainTextObject(text=call_view.chunks(result)[0], emoji=False)))
    shown.append(_footer(card, ""))
    return shown


def decided_text(card: Card, verdict: str) -> str:
    return f"{verdict}\n{sentence(card)}"

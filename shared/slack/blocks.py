"""Block Kit builders and the texts of the product's own posts: questions, approval cards, answers.

Every message that has blocks also has a plain ``text``: Slack shows it in notifications and where blocks do not
render. The model's Markdown (answers, progress updates) goes in Slack's ``markdown`` block, which Slack renders
itself; the product's own texts are mrkdwn in sections.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
    MarkdownBlock,
    MarkdownTextObject,
    SectionBlock,
)

from shared.slack.call_view import inline

LINK_ACTION = "question_link"  # a link button on a question (an MCP server's URL request): Slack opens the URL
MAX_OPTIONS = 10  # buttons per question; Slack allows 25 per actions block, people read far fewer


def question_value(question_id: str, option: int) -> str:
    """A button's value: the question it answers and the option's number (checked against the store on press)."""
    return f"{question_id}|{option}"


def parse_question_value(value: str) -> tuple[str, int] | None:
    """``(question_id, option number)`` from a button value; None if it is not of that form."""
    question_id, _, number = value.rpartition("|")
    if not question_id or not number.isdigit():
        return None
    return question_id, int(number)


def question_text(
    question: str, options: list[str], *, operators: frozenset[str] | None = None, link: str | None = None
) -> str:
    """The plain-text form of a question: the notification text, and the fallback where blocks do not render.

    With ``operators`` it mentions them, so they are notified when it is asked; ``link`` is a URL to visit.
    """
    who = f"{operator_mentions(operators)}: " if operators else ""
    lines = [f":speech_balloon: {who}*Question for the operator:* {question}"]
    if link:
        lines.append(link_line(link))
    lines += [f"{i}. {escaped(option)}" for i, option in enumerate(options, start=1)]  # an MCP server's, maybe
    if options:
        lines.append("Reply in this thread with the number or the option, or press a button.")
    else:
        lines.append("Reply in this thread to answer.")
    return "\n".join(lines)


def question_blocks(
    question_id: str,
    question: str,
    options: list[str],
    *,
    operators: frozenset[str] | None = None,
    link: str | None = None,
) -> list[Any]:
    """Block Kit for a question: the text, and one button per option whose value names the question; ``link``
    becomes a link button first (Slack opens it; pressing it answers nothing)."""
    who = f"{operator_mentions(operators)}: " if operators else ""
    shown = f":speech_balloon: {who}*Question:* {question}" + (f"\n{link_line(link)}" if link else "")
    blocks: list[Any] = [SectionBlock(text=MarkdownTextObject(text=shown))]
    elements: list[Any] = [ButtonElement(text="Open link", action_id=LINK_ACTION, url=link)] if link else []
    elements += [
        ButtonElement(text=option[:75], action_id=f"answer_{i}", value=question_value(question_id, i))
        for i, option in enumerate(options, start=1)
    ]
    if elements:
        blocks.append(ActionsBlock(block_id=f"question:{question_id}", elements=elements))
    return blocks


def link_line(link: str) -> str:
    """A URL a question asks someone to open (an MCP server's URL request), as MCP's URL mode asks of a client: the
    host it opens, and every character of it shown inertly, never in Slack's link form (where a ``|`` would give
    it a label of the server's choosing)."""
    host = urlsplit(link).hostname or "no host"
    with contextlib.suppress(UnicodeError):
        host = host.encode("idna").decode("ascii")  # a look-alike host shows as what it is
    return f"Link (opens {inline(host, len(host))}): {inline(link, len(link))}"  # as code: no markup forms in it


def answered_text(user: str, answer: str, question: str, *, pressed: bool) -> str:
    """A question post once answered, by a button or a reply: the buttons go, the answer stays, shown as itself (a
    reply's text quoted back, an MCP server's option: no mention or link forms from it)."""
    if pressed:
        return f":white_check_mark: <@{user}> chose: *{escaped(answer)}*\n_{question}_"
    return f":white_check_mark: <@{user}> answered: {as_written(answer)}\n_{question}_"


def cancelled_text(question: str, why: str = "a newer question replaces it") -> str:
    return f":no_entry_sign: ~{question}~\n_Cancelled: {why}._"


def abandoned_text(question: str, hours: int) -> str:
    return f":hourglass: ~{question}~\n_Abandoned after {hours} hours._"


def operator_mentions(operators: frozenset[str]) -> str:
    """The operators as Slack mentions, or "Operators" when none are configured."""
    return " ".join(f"<@{user}>" for user in sorted(operators)) or "Operators"


# --- approval cards ----------------------------------------------------------------------------------

APPROVE_ACTION = "approval_approve"
DENY_ACTION = "approval_deny"


def approval_value(approval_id: str, digest: str) -> str:
    """An approval button's value: the approval it decides and the digest of the call it was shown for."""
    return f"{approval_id}|{digest}"


def parse_approval_value(value: str) -> tuple[str, str] | None:
    approval_id, _, digest = value.rpartition("|")
    return (approval_id, digest) if approval_id and digest else None


def escaped(text: str) -> str:
    """Text shown as itself in mrkdwn: no link, mention or markup can be formed from it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def as_written(text: str) -> str:
    """A person's Slack message quoted back (its text as Slack sent it, ``&``, ``<`` and ``>`` already encoded): its
    mentions and links shown as written (``<@U…>``), none of them live; the rest as Slack showed it."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


# --- the Stop control ---------------------------------------------------------------------------------

STOP_ACTION = "session_stop"
STOP_BLOCK_PREFIX = "stop:"  # a Stop button's block: "stop:<session id>"


def stop_block(session_id: str) -> ActionsBlock:
    """A Stop button for a working session; its value names the session (checked against the store on press)."""
    button = ButtonElement(text="Stop", action_id=STOP_ACTION, value=session_id, style="danger")
    return ActionsBlock(block_id=f"{STOP_BLOCK_PREFIX}{session_id}", elements=[button])


def progress_blocks(markdown: str, session_id: str | None) -> list[Any] | None:
    """A progress update as Slack renders the model's Markdown (a ``markdown`` block), with the Stop button under
    it when ``session_id`` is given; None if the text is too long for one message's markdown block."""
    if not markdown.strip() or len(markdown) > ANSWER_CHARS:
        return None
    return [MarkdownBlock(text=markdown), *([stop_block(session_id)] if session_id else [])]


SECTION_CHARS = 3000  # Slack's limit for a section block's text
# Slack's limit for the text of all markdown blocks in one message together (docs: the markdown block).
MARKDOWN_CHARS = 12_000
# The Markdown one answer message carries. Half of Slack's limit: neutralising can lengthen a text ("@here" gains a
# zero-width space) and Slack may count a character outside the Basic Multilingual Plane (an emoji) as two.
ANSWER_CHARS = MARKDOWN_CHARS // 2


# --- feedback on a final answer ------------------------------------------------------------------------

FEEDBACK_ACTION = "answer_feedback"
RATINGS = ("positive", "negative")


def feedback_value(session_id: str, rating: str) -> str:
    return f"{session_id}|{rating}"


def parse_feedback_value(value: str) -> tuple[str, str] | None:
    """``(session_id, rating)`` from a feedback button's value; None if it is not of that form."""
    session_id, _, rating = value.rpartition("|")
    return (session_id, rating) if session_id and rating in RATINGS else None


def answer_blocks(markdown: str, session_id: str | None) -> list[Any]:
    """One message of a final answer: the model's Markdown in a ``markdown`` block, which Slack renders itself
    (at most ``ANSWER_CHARS``: a longer answer is several messages); on the last one (``session_id`` given) the
    👍/👎 feedback buttons, whose values name the session."""
    shown: list[Any] = [MarkdownBlock(text=markdown)]
    if not session_id:
        return shown
    buttons = FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION,
        positive_button=FeedbackButtonObject(text="👍", value=feedback_value(session_id, "positive"),
                                             accessibility_label="This answer helped"),
        negative_button=FeedbackButtonObject(text="👎", value=feedback_value(session_id, "negative"),
                                             accessibility_label="This answer did not help"),
    )  # fmt: skip
    return [*shown, ContextActionsBlock(block_id=f"feedback:{session_id}", elements=[buttons])]


def tree_status(lines: list[tuple[int, str, str]], *, done: int, total: int,
                stop: str | None = None) -> tuple[str, list[Any]]:  # fmt: skip
    """The message listing a session's delegated tasks: ``(depth, task, state)`` per child, in tree order; with
    ``stop`` (the tree's root session, while its tasks run) a Stop button for the whole tree."""
    header = f":busts_in_silhouette: *Delegated tasks* ({done} of {total} finished)"
    shown = lines[:TREE_LINES]
    rows = [f"{'    ' * (depth - 1)}• {escaped(_folded_line(task))} — _{state}_" for depth, task, state in shown]
    if len(lines) > len(shown):
        rows.append(f"… and {len(lines) - len(shown)} more")
    text = "\n".join([header, *rows])
    section: list[Any] = [SectionBlock(text=MarkdownTextObject(text=text[:SECTION_CHARS]))]
    return text, section + ([stop_block(stop)] if stop else [])


TREE_LINES = 20  # children listed in the status message; the rest are counted


def _folded_line(task: str, limit: int = 90) -> str:
    line = " ".join(task.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"

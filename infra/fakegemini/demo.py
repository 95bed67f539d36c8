"""A scripted, deterministic stand-in for Gemini, for trying the product offline.

The local dev stack uses it when no real Gemini credentials exist, so a person can
mention the bot, see a question with buttons, answer it and watch the session resume.
It must never pass for a model: every text it produces starts with ``[demo model]``.

Everything here is a pure function from the generateContent request JSON to a script
item (see ``script.py``), so the server answers a demo turn through the same code path
as a scripted one, and the rules can be unit-tested without a server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import tour

PREFIX = "[demo model]"
ASK_TOOL = "ask_operator"
RESTART_TOOL = "restart_service"  # an approve-tier example tool: the demo shows an approval card with it
ENVIRONMENTS = ("dev", "staging", "production")
DEMO_OPTIONS = ("Option A", "Option B")
DISCLAIMER = "(This is a scripted offline stand-in, not Gemini.)"


def _clip(text: str, limit: int) -> str:
    """Collapse whitespace so a quoted Slack thread reads as one line, then cut it short."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def _contents(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    contents = body.get("contents")
    if not isinstance(contents, list):
        return []
    return [c for c in contents if isinstance(c, Mapping)]


def _parts(content: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = content.get("parts")
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, Mapping)]


def declared_tools(body: Mapping[str, Any]) -> list[str]:
    """Names of the functions the request lets the model call, in declaration order."""
    names: list[str] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, Mapping):
            continue
        # The SDK sends camelCase, but the API also takes proto field names; accept both.
        declarations = tool.get("functionDeclarations", tool.get("function_declarations"))
        for declaration in declarations if isinstance(declarations, list) else []:
            if isinstance(declaration, Mapping) and isinstance(declaration.get("name"), str):
                names.append(declaration["name"])
    return names


def has_asked(body: Mapping[str, Any]) -> bool:
    """True once any model turn in this conversation called ``ask_operator``: ask only once."""
    for content in _contents(body):
        if content.get("role") != "model":
            continue
        for part in _parts(content):
            call = part.get("functionCall")
            if isinstance(call, Mapping) and call.get("name") == ASK_TOOL:
                return True
    return False


def last_user_text(body: Mapping[str, Any]) -> str:
    """The newest text a user turn carries, or an empty string."""
    for content in reversed(_contents(body)):
        if content.get("role", "user") != "user":
            continue
        texts = [p["text"] for p in _parts(content) if isinstance(p.get("text"), str)]
        if texts:
            return str(texts[-1])
    return ""


def _last_part(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The role and the final part of the last content, which is what the model answers."""
    contents = _contents(body)
    if not contents:
        return "user", {}
    parts = _parts(contents[-1])
    return str(contents[-1].get("role", "user")), (parts[-1] if parts else {})


def answer_text(response: object) -> str:
    """The operator's answer out of an ask_operator function response, however it is wrapped."""
    if isinstance(response, Mapping):
        for key in ("answer", "result", "output", "text"):
            if key in response:
                return answer_text(response[key])
        return json.dumps(response, ensure_ascii=False, sort_keys=True)
    if isinstance(response, str):
        return response
    return json.dumps(response, ensure_ascii=False)


def request_of(text: str) -> str:
    """The request itself, when the product framed it with the thread: "...working on now (data, as JSON):\n{...}"."""
    marker = "working on now (data, as JSON):\n"
    if marker not in text:
        return text
    framed = text.split(marker, 1)[1].split("\n", 1)[0]
    try:
        return str(json.loads(framed).get("text", framed))
    except ValueError:
        return framed


def restart_args(request: str) -> dict[str, str]:
    """``restart <service> [in <environment>]`` read from a request, with the demo's defaults."""
    words = [w.strip(".,!?`'\"") for w in request.split()]
    lowered = [w.lower() for w in words]
    environment = next((w for w in lowered if w in ENVIRONMENTS), "staging")
    after = lowered.index("restart") + 1 if "restart" in lowered else len(words)
    candidates = [w for w in words[after:] if w.lower() not in {*ENVIRONMENTS, "the", "in", "on", "service", "please"}]
    return {"name": candidates[0] if candidates else "api", "environment": environment}


def _text(text: str) -> dict[str, Any]:
    return {"text": text}


def demo_item(body: Mapping[str, Any]) -> dict[str, Any]:
    """The demo model's next turn for this request, as a script item.

    The rules, first match wins: answer a function response (thanking the operator for
    an ``ask_operator`` answer, summarising any other tool result); without tools,
    summarise; ask the operator once on a fresh user message if the tool is declared;
    otherwise echo the message back.
    """
    role, part = _last_part(body)
    response = part.get("functionResponse")
    if isinstance(response, Mapping):
        name = str(response.get("name", "tool"))
        if name == ASK_TOOL:
            answer = _clip(answer_text(response.get("response")), 200)
            return _text(f"{PREFIX} Thanks — the operator answered: {answer}. Done.")
        result = _clip(answer_text(response.get("response")), 200)
        return _text(f"{PREFIX} The tool {name} returned: {result}. {DISCLAIMER}")
    user_text = last_user_text(body)
    tools = declared_tools(body)
    if not tools:
        turns = len(_contents(body))
        return _text(
            f'{PREFIX} Summary: {turns} message(s) so far; the latest says: "{_clip(user_text, 200)}". {DISCLAIMER}'
        )
    fresh = role == "user" and isinstance(part.get("text"), str)
    if fresh and (walk := tour.item(str(part["text"]), tools)) is not None:  # "demo": the guided tour
        return walk
    if fresh and RESTART_TOOL in tools and "restart" in request_of(str(part["text"])).lower():
        return {"function_calls": [{"name": RESTART_TOOL, "args": restart_args(request_of(str(part["text"])))}]}
    if fresh and ASK_TOOL in tools and not has_asked(body):
        question = f"{PREFIX} Which option should I use for: {_clip(request_of(str(part['text'])), 80)}?"
        return {"function_calls": [{"name": ASK_TOOL, "args": {"question": question, "options": list(DEMO_OPTIONS)}}]}
    return _text(f'{PREFIX} I read your message: "{_clip(request_of(user_text), 200)}". {DISCLAIMER}')


# The line the workspace page shows while the demo model stands in for Gemini.
NOTICE = (
    "Scripted demo: the bot runs on the offline demo model, not Gemini. Mention @agent with “demo” for a tour: "
    "a plain answer, a question with options, an approval and a delegation."
)

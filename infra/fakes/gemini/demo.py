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
import re
from collections.abc import Mapping
from typing import Any

from . import tour

PREFIX = "[demo model]"
ASK_TOOL = "ask_operator"
RESTART_TOOL = "restart_service"  # an approve-tier example tool: the demo shows an approval card with it
DELEGATE_TOOL = "delegate"  # a request that says "delegate" splits into two delegated tasks
ASK_PARENT_TOOL = "ask_parent"  # declared only to delegated children
ANSWER_CHILD_TOOL = "answer_child"
ASKS_PARENT = "ask which half comes first"  # the second demo task asks its parent this before it works
DEMO_PARENT_ANSWER = "Start with the first half."
ENVIRONMENTS = ("dev", "staging", "production")
# The demo's question names real choices, as a model would: the two a request offers ("redis or memcached"), the
# usual two for what it asks to pick, or whether to go ahead.
CHOICES = {
    "database": ("PostgreSQL", "SQLite"),
    "cache": ("Redis", "Memcached"),
    "region": ("europe-west1", "us-central1"),
    "queue": ("Cloud Tasks", "Pub/Sub"),
}
GO_AHEAD = ("Yes, go ahead", "No, leave it")
_EITHER = re.compile(r"([\w./-]+),? or ([\w./-]+)", re.IGNORECASE)
_MENTION = re.compile(r"<@\w+>\s*")
# "mcp lookup api", "mcp delete <branch>", "mcp ticket <title>": the sample MCP server's three paths (make dev)
MCP_VERBS = {
    "lookup": "mcp.demo.lookup_service",
    "delete": "mcp.demo.delete_branch",
    "ticket": "mcp.demo.create_ticket",
}
DISCLAIMER = "(This is a scripted offline stand-in, not Gemini.)"


def _clip(text: str, limit: int) -> str:
    """Collapse whitespace so a quoted Slack thread reads as one line, then cut it short at a word's end."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut.rstrip(",;:") + "…"


def _quoted(text: str, limit: int) -> str:
    """Another demo text quoted in this one: without its own "[demo model]" label (this text has one already)."""
    return _clip(text.replace(PREFIX, " "), limit)


def demo_question(request: str) -> tuple[str, list[str]]:
    """The demo's question about a request and its options, each option saying what it is; the request is quoted
    without the mention of the bot."""
    subject = _clip(_MENTION.sub("", request).strip(), 80)
    either = _EITHER.search(subject)
    if either:
        return f"{PREFIX} Which should I use for: {subject}?", [either.group(1), either.group(2)]
    kind = next((k for k in CHOICES if k in subject.lower()), None)
    if kind is not None:
        return f"{PREFIX} Which {kind} should I use for: {subject}?", list(CHOICES[kind])
    return f"{PREFIX} Should I go ahead with: {subject}?", list(GO_AHEAD)


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
    request = tour.framed_request(text)
    return text if request is None else request


def restart_args(request: str) -> dict[str, str]:
    """``restart <service> [in <environment>]`` read from a request, with the demo's defaults."""
    words = [w.strip(".,!?`'\"") for w in request.split()]
    lowered = [w.lower() for w in words]
    environment = next((w for w in lowered if w in ENVIRONMENTS), "staging")
    after = lowered.index("restart") + 1 if "restart" in lowered else len(words)
    candidates = [w for w in words[after:] if w.lower() not in {*ENVIRONMENTS, "the", "in", "on", "service", "please"}]
    return {"name": candidates[0] if candidates else "api", "environment": environment}


def mcp_call(request: str, tools: list[str]) -> dict[str, Any] | None:
    """``mcp <lookup|delete|ticket> <what>`` as a call of the sample MCP server's tool, if it is declared."""
    words = request.split()
    lowered = [w.lower().strip(".,!?`'\"") for w in words]
    if "mcp" not in lowered or lowered.index("mcp") + 1 >= len(words):
        return None
    at = lowered.index("mcp")
    verb, rest = lowered[at + 1], " ".join(words[at + 2 :]).strip() or "api"
    tool = MCP_VERBS.get(verb)
    if tool is None or tool not in tools:
        return None
    args = {"lookup": {"name": rest}, "delete": {"repo": "app", "branch": rest}, "ticket": {"title": rest}}[verb]
    return {"function_calls": [{"name": tool, "args": args}]}


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
    tools = declared_tools(body)
    delegated = _delegation_item(body, role, part, tools)
    if delegated is not None:
        return delegated
    response = part.get("functionResponse")
    if isinstance(response, Mapping):
        name = str(response.get("name", "tool"))
        if name == ASK_TOOL:
            answer = _clip(answer_text(response.get("response")), 200)
            return _text(f"{PREFIX} Thanks — the operator answered: {answer}. Done.")
        result = _clip(answer_text(response.get("response")), 200)
        answered = response.get("response")
        edited = answered.get("edited") if isinstance(answered, Mapping) else None
        if isinstance(edited, Mapping):  # an operator edited the call before approving it
            ran = _clip(json.dumps(edited.get("arguments"), ensure_ascii=False), 200)
            return _text(f"{PREFIX} An operator edited my call before approving it; the tool {name} ran with {ran} "
                         f"and returned: {result}. {DISCLAIMER}")  # fmt: skip
        return _text(f"{PREFIX} The tool {name} returned: {result}. {DISCLAIMER}")
    user_text = last_user_text(body)
    if not tools:
        turns = len(_contents(body))
        return _text(
            f'{PREFIX} Summary: {turns} message(s) so far; the latest says: "{_clip(user_text, 200)}". {DISCLAIMER}'
        )
    fresh = role == "user" and isinstance(part.get("text"), str)
    if fresh and (walk := tour.item(str(part["text"]))) is not None:  # "demo": the guided tour
        return walk
    remote = mcp_call(request_of(str(part["text"])), tools) if fresh else None
    if remote is not None:
        return remote
    if fresh and RESTART_TOOL in tools and "restart" in request_of(str(part["text"])).lower():
        return {"function_calls": [{"name": RESTART_TOOL, "args": restart_args(request_of(str(part["text"])))}]}
    if fresh and ASK_TOOL in tools and not has_asked(body):
        question, options = demo_question(request_of(str(part["text"])))
        return {"function_calls": [{"name": ASK_TOOL, "args": {"question": question, "options": options}}]}
    return _text(f'{PREFIX} I read your message: "{_clip(request_of(user_text), 200)}". {DISCLAIMER}')


# The line the workspace page shows while the demo model stands in for Gemini.
NOTICE = (
    "Scripted demo: the bot runs on the offline demo model, not Gemini. Mention @agent with “demo” for a tour: "
    "a plain answer, a question with options, an approval and a delegation."
)


def _delegation_item(
    body: Mapping[str, Any], role: str, part: Mapping[str, Any], tools: list[str]
) -> dict[str, Any] | None:
    """The demo's delegation path, or None: a fresh request that says "delegate" starts two children; the second
    asks its parent which half comes first (blocking); the parent answers with ``answer_child``; each child
    reports back, and the parent sums up."""
    text = part.get("text") if isinstance(part.get("text"), str) else None
    child = ASK_PARENT_TOOL in tools
    if child:
        return _child_item(body, role, part, text)
    news = _notes(text or "")
    asked = [item for item in news if item.get("kind") == "child_question"]
    if asked and ANSWER_CHILD_TOOL in tools:
        calls = [{"name": ANSWER_CHILD_TOOL, "args": {"child_id": str(item.get("child_id", "")),
                                                      "answer": DEMO_PARENT_ANSWER}} for item in asked]  # fmt: skip
        return {"function_calls": calls}
    if any(item.get("kind") == "child_result" for item in news):  # every result so far, not only the newest
        results = [item for t in _user_texts(body) for item in _notes(t) if item.get("kind") == "child_result"]
        lines = "\n".join(f"• {_quoted(str(item.get('task', '')), 60)}: {_quoted(str(item.get('result', '')), 90)}"
                          for item in results)  # fmt: skip
        return _text(f"{PREFIX} Results of my delegated tasks:\n{lines}")
    responses = [_parts_response(p) for p in _last_user_parts(body)]
    if any(r is not None and r[0] == ANSWER_CHILD_TOOL for r in responses):
        return _text(f"{PREFIX} I answered my delegated task's question; its result will follow.")
    reported = [r for r in responses if r is not None and r[0] == DELEGATE_TOOL]
    if reported:
        summary = "\n".join(f"• {_quoted(answer_text(r[1]), 120)}" for r in reported)
        return _text(f"{PREFIX} My delegated tasks reported:\n{summary}\n{DISCLAIMER}")
    if role == "user" and text is not None and DELEGATE_TOOL in tools:
        request = request_of(text)
        if DELEGATE_TOOL in request.lower():
            subject = _clip(re.sub(r"<@\w+>\s*", "", request), 60)  # without the mention of the bot
            tasks = [f"Look into the first half of: {subject}",
                     f"Look into the second half of: {subject}; first {ASKS_PARENT} with ask_parent"]  # fmt: skip
            return {"function_calls": [{"name": DELEGATE_TOOL, "args": {"task": task}} for task in tasks]}
    return None


def _child_item(body: Mapping[str, Any], role: str, part: Mapping[str, Any], text: str | None) -> dict[str, Any]:
    """A delegated child: the task that says so asks its parent first; every child reports what it did."""
    opening = first_user_text(body)
    task = _clip(_task_of(opening), 80)
    response = part.get("functionResponse")
    if isinstance(response, Mapping) and response.get("name") == ASK_PARENT_TOOL:
        answer = _quoted(answer_text(response.get("response")), 100)
        return _text(f"{PREFIX} The parent said: {answer} Done with: {task}.")
    if role == "user" and text is not None and ASKS_PARENT in opening and not _called(body, ASK_PARENT_TOOL):
        question = f"{PREFIX} Which half should come first?"
        return {"function_calls": [{"name": ASK_PARENT_TOOL, "args": {"question": question, "blocking": True}}]}
    return _text(f"{PREFIX} Done with: {task}.")


def first_user_text(body: Mapping[str, Any]) -> str:
    """The first text of the conversation (a child's opening holds its task)."""
    for content in _contents(body):
        for p in _parts(content):
            if isinstance(p.get("text"), str):
                return str(p["text"])
    return ""


def _task_of(opening: str) -> str:
    """The task out of a child's opening, where it is the last line, as JSON."""
    last = opening.strip().splitlines()[-1] if opening.strip() else ""
    try:
        found = json.loads(last)
    except ValueError:
        return last
    return str(found.get("task", last)) if isinstance(found, Mapping) else last


def _user_texts(body: Mapping[str, Any]) -> list[str]:
    return [str(p["text"]) for c in _contents(body) if c.get("role", "user") == "user" for p in _parts(c)
            if isinstance(p.get("text"), str)]  # fmt: skip


def _called(body: Mapping[str, Any], name: str) -> bool:
    return any(
        isinstance(p.get("functionCall"), Mapping) and p["functionCall"].get("name") == name
        for content in _contents(body) if content.get("role") == "model" for p in _parts(content)
    )  # fmt: skip


def _notes(text: str) -> list[Mapping[str, Any]]:
    """The JSON lines of a notes message (what arrived while the session worked)."""
    found: list[Mapping[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, Mapping):
                found.append(item)
    return found


def _last_user_parts(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    contents = _contents(body)
    return _parts(contents[-1]) if contents and contents[-1].get("role", "user") == "user" else []


def _parts_response(part: Mapping[str, Any]) -> tuple[str, object] | None:
    response = part.get("functionResponse")
    if not isinstance(response, Mapping):
        return None
    return str(response.get("name", "")), response.get("response")

"""A server's request for input (MCP's input-required result) as an operator question, and back.

What a person can give in a thread is asked (the server's message shown as text: it forms no link or mention): one
elicitation, either a form (its fields become the question; a single field with choices becomes buttons) or a URL
to visit (a web address only: shown whole with its host, a link button, then Done or Cancel). Sampling and roots
requests and any form field that looks like a secret are refused (secrets are never collected through Slack);
several requests at once are asked one at a time. ``Pending`` is what the question stores so the answer can resume
the call.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import mcp_types

from shared.errors import Refused
from shared.slack.blocks import escaped

DONE, CANCEL, DECLINE = "Done", "Cancel", "Decline"
MAX_LINK_CHARS = 3000  # the longest URL Slack takes for a link button
_SECRET = re.compile(r"pass(word|phrase)?|secret|token|api[\s_-]?key|credential|private[\s_-]?key|otp|pin\b|cvv",
                     re.IGNORECASE)  # fmt: skip
# What a request's own message may not ask for (narrower: the message is prose, not a field name).
_SECRET_PROSE = re.compile(r"password|passphrase|secret|token|api[\s_-]?key|credential|private[\s_-]?key",
                           re.IGNORECASE)  # fmt: skip


class InputRefused(Refused):
    """The server asked for something the operator must not be asked in a thread; the message says what."""


@dataclass(frozen=True)
class Pending:
    """An MCP call waiting for the operator: everything needed to send the answer back, exactly once."""

    server: str
    tool: str  # the server's own name of the tool
    arguments: dict[str, Any]
    request_state: str | None
    key: str  # the server's key of the request
    mode: str  # "form" or "url"
    schema: dict[str, Any]  # a form's requested schema
    caller: str  # the session whose model turn made the call
    seq: int
    index: int
    round: int  # 1 for the first answer, 2 if the server asked again, ...

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Pending:
        return cls(**doc)


@dataclass(frozen=True)
class Ask:
    text: str
    options: list[str]
    link: str | None
    key: str
    mode: str
    schema: dict[str, Any]


def ask_for(server: str, result: mcp_types.InputRequiredResult) -> Ask:
    """The question to post for ``result``, or ``InputRefused``. Of several requests in one round (a tool whose
    resolvers each ask) the first is asked: its answer goes back alone, and the server asks again for what it
    still needs (the SDK's server does), one question at a time."""
    requests = result.input_requests or {}
    if not requests:
        raise InputRefused(f"MCP server {server!r} asked for input without saying what it needs")
    other = next((r for r in requests.values() if not isinstance(r, mcp_types.ElicitRequest)), None)
    if other is not None:
        raise InputRefused(f"MCP server {server!r} asked for {other.method}, which the agent does not provide")
    key, request = next((k, r) for k, r in requests.items() if isinstance(r, mcp_types.ElicitRequest))
    params = request.params
    message = f"MCP server `{server}` asks: {escaped(params.message)}"  # its words: no link or mention forms
    if isinstance(params, mcp_types.ElicitRequestURLParams):
        link = urlsplit(params.url)
        if link.scheme.lower() not in {"http", "https"} or not link.hostname or len(params.url) > MAX_LINK_CHARS:
            raise InputRefused(f"MCP server {server!r} asked the operator to open {params.url[:200]!r} (untrusted "
                               "text), which is not a web address a link button can open")  # fmt: skip
        text = f"{message}\nOpen the link, finish there, then answer {DONE} (or {CANCEL})."
        return Ask(text, [DONE, CANCEL], params.url, key, "url", {})
    schema = params.requested_schema
    fields: dict[str, Any] = schema.get("properties") or {}
    secret = [name for name, spec in fields.items() if _looks_secret(name, spec)]
    if not secret and _SECRET_PROSE.search(params.message):
        secret = ["what its message describes"]
    if secret:
        raise InputRefused(
            f"MCP server {server!r} asked for {', '.join(secret)}, which looks like a secret; secrets "
            "are never collected through Slack. The operator must give it to that server directly."
        )
    if len(fields) == 1:
        [(name, spec)] = fields.items()
        choices = _choices(spec)
        if choices:
            return Ask(message, [*choices, DECLINE], None, key, "form", schema)
        return Ask(f"{message}\n(Answer with the {escaped(name)}, or {DECLINE}.)", [], None, key, "form", schema)
    names = escaped(", ".join(fields))  # the server's field names: no link or mention forms from them either
    text = f'{message}\n(Answer with one line per field, "name: value", for: {names}; or {DECLINE}.)'
    return Ask(text, [], None, key, "form", schema)


def elicit_result(pending: Pending, answer: str, matched: str | None) -> dict[str, Any]:
    """The operator's answer as the server's ``ElicitResult`` (plain JSON, as stored and sent)."""
    reply = (matched or answer).strip()
    if pending.mode == "url":
        return {"action": "accept" if reply.lower() == DONE.lower() else "cancel"}
    if reply.lower() == DECLINE.lower():
        return {"action": "decline"}
    fields: dict[str, Any] = pending.schema.get("properties") or {}
    if len(fields) == 1:
        [(name, spec)] = fields.items()
        return {"action": "accept", "content": {name: _typed(reply, spec)}}
    content = _fields(reply, fields)
    return {"action": "accept", "content": content} if content else {"action": "cancel"}


def _looks_secret(name: str, spec: Any) -> bool:
    spec = spec if isinstance(spec, dict) else {}
    words = " ".join([name, str(spec.get("title", "")), str(spec.get("description", ""))])
    return bool(_SECRET.search(words)) or spec.get("format") == "password" or spec.get("writeOnly") is True


def _choices(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return []
    if spec.get("type") == "boolean":
        return ["yes", "no"]
    if isinstance(spec.get("enum"), list):
        return [str(v) for v in spec["enum"]][:20]
    one_of = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(one_of, list) and all(isinstance(o, dict) and "const" in o for o in one_of):
        return [str(o["const"]) for o in one_of][:20]
    return []


def _typed(value: str, spec: Any) -> Any:
    """A reply as the field's type; left as text when it does not read as one (the server then says so)."""
    kind = spec.get("type") if isinstance(spec, dict) else None
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean":
        return value.lower() in {"yes", "true", "y", "1"}
    if kind == "array":
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _fields(reply: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A multi-field reply: a JSON object, or "name: value" lines; unknown names are left out."""
    try:
        parsed = json.loads(reply)
    except ValueError:
        parsed = dict(line.split(":", 1) for line in reply.splitlines() if ":" in line)
    if not isinstance(parsed, dict):
        return {}
    content = {}
    for name, value in parsed.items():
        key = str(name).strip()
        if key in fields:
            typed = isinstance(value, bool | int | float)
            content[key] = value if typed else _typed(str(value).strip(), fields[key])
    return content

"""One MCP tool as the registry sees it: its name, declaration, tier and ledger facts, and how a call runs.

Tiers follow its annotations (flow 9): ``readOnlyHint: true`` is ``safe``; anything else (``destructiveHint``, or
no hints at all) is ``approve``; ``TOOL_TIERS`` wins over both (``shared.agent.tools.policy``). A tool is outward
unless it is read-only, and idempotent only with ``idempotentHint: true``, so the ledger never re-runs any other
after a crash. Annotations are the server's claims; configuration is how a team overrides them.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types
from google.genai import types
from referencing.exceptions import Unresolvable

from shared.agent.tools.base import Outcome, Suspend, Tier, ToolContext
from shared.agent.tools.mcp import connection, inputs, results, schemas
from shared.agent.tools.result import ToolResult
from shared.asks import questions, routing
from shared.config_values import McpServer
from shared.slack.edit_modal import named_keys, unnamed_keys
from shared.state.models import Question

log = logging.getLogger(__name__)

MAX_NAME = 64  # what Gemini accepts for a function name
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def registry_name(server: str, tool: str) -> str:
    """``mcp.<server>.<tool>``, with characters Gemini refuses replaced; a long one is cut and made unique."""
    name = _UNSAFE.sub("_", f"mcp.{server}.{tool}")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


@dataclass(frozen=True)
class McpTool:
    server: McpServer
    listed: mcp_types.Tool
    posts: bool = False
    top_level_only: bool = False
    starts_children: bool = False

    @property
    def name(self) -> str:
        return registry_name(self.server.name, self.listed.name)

    @property
    def _hints(self) -> mcp_types.ToolAnnotations:
        return self.listed.annotations or mcp_types.ToolAnnotations()

    @property
    def read_only(self) -> bool:
        return self._hints.read_only_hint is True

    @property
    def outward(self) -> bool:
        return not self.read_only

    @property
    def idempotent(self) -> bool:
        return self._hints.idempotent_hint is True

    @property
    def tier(self) -> Tier:
        return Tier.SAFE if self.read_only else Tier.APPROVE

    def declaration(self) -> types.FunctionDeclaration:
        schema = {k: v for k, v in self.listed.input_schema.items() if k not in {"$schema", "title"}}
        return types.FunctionDeclaration(name=self.name, description=self.description(), parameters_json_schema=schema)

    def description(self) -> str:
        hints = self._hints
        flags = {"read-only": hints.read_only_hint, "destructive": hints.destructive_hint,
                 "idempotent": hints.idempotent_hint}  # fmt: skip
        said = [word for word, on in flags.items() if on is True]
        own = (self.listed.description or self.listed.title or self.listed.name).strip()
        return f"{own}\n\n(Tool {self.listed.name!r} of MCP server {self.server.name!r}; " \
               f"{', '.join(said) or 'no behaviour hints'}.)"  # fmt: skip

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Outcome:
        """Check the arguments against the tool's schema, then call it; every failure is an error response."""
        problem = self.argument_problem(args)
        if problem is not None:
            return ToolResult.fail(problem)
        asked: list[str] = []
        try:
            outcome = connection.call_tool(
                self.server, self.listed.name, args, listed=self.listed, asked_mid_call=asked
            )
        except connection.McpFailure as exc:
            return results.declined_mid_call(self.server.name, asked, ToolResult.fail(exc.told()))
        return self._outcome(outcome, args, ctx, round=1, asked=asked)

    def resume_input(self, question: Question, ctx: ToolContext) -> Outcome:
        """The call the operator's answer to ``question`` resumes (``ResumesWithInput``)."""
        return self.resume(inputs.Pending.from_doc(question.mcp_input or {}), question, ctx)

    def resume(self, pending: inputs.Pending, question: Question, ctx: ToolContext) -> Outcome:
        """The same call again, with the operator's answer and the state the server gave with its request."""
        answer = inputs.elicit_result(pending, question.answer or "", question.matched_option)
        asked: list[str] = []
        try:
            outcome = connection.call_tool(self.server, pending.tool, pending.arguments, listed=self.listed,
                                           input_responses={pending.key: answer},
                                           request_state=pending.request_state, asked_mid_call=asked)  # fmt: skip
        except connection.McpFailure as exc:
            if not exc.expired_state:
                failed = ToolResult.fail(exc.told())
                return results.declined_mid_call(self.server.name, asked, failed)
            text = (f"The request of `{self.name}` expired on MCP server `{self.server.name}` before the answer "
                    "reached it (a server keeps such requests only for a while), so the call did not complete. "
                    "Call it again if it is still needed.")  # fmt: skip
            ctx.post_ts.append(ctx.surface.post(f":hourglass: {text}", key=ctx.post_key(f":expired{pending.round}")))
            log.info("an MCP request state expired", extra={"tool": self.name})
            return ToolResult.fail(text)
        return self._outcome(outcome, pending.arguments, ctx, round=pending.round + 1, asked=asked)

    def _outcome(self, outcome: connection.Outcome, args: dict[str, Any], ctx: ToolContext, *, round: int,
                 asked: list[str]) -> Outcome:  # fmt: skip
        if isinstance(outcome, mcp_types.InputRequiredResult):
            return self._ask(outcome, args, ctx, round=round)
        response = results.response(self.server.name, self.name, outcome, self.listed.output_schema)
        return results.declined_mid_call(self.server.name, asked, response)

    def _ask(self, result: mcp_types.InputRequiredResult, args: dict[str, Any], ctx: ToolContext, *,
             round: int) -> Outcome:  # fmt: skip
        """The server needs a person's input: ask the operator, and pause until the answer resumes the call."""
        if not ctx.session.top_level:
            return ToolResult.fail(f"{self.name} needs an operator's input, and only the session talking to the "
                                   "thread may ask the operator; the call did not complete")  # fmt: skip
        try:
            ask = inputs.ask_for(self.server.name, result)
        except inputs.InputRefused as exc:
            return ToolResult.fail(f"{exc}. The call did not complete.")
        if routing.nobody_can_answer(ctx.session.origin.channel):
            refused = routing.refuse_question(ctx.surface, key=ctx.post_key(f":nobody-to-answer{round}"))
            return ToolResult.fail(f"{refused} The call did not complete.")
        pending = inputs.Pending(server=self.server.name, tool=self.listed.name, arguments=args,
                                 request_state=result.request_state, key=ask.key, mode=ask.mode, schema=ask.schema,
                                 caller=ctx.caller, seq=ctx.seq, index=ctx.call_index, round=round)  # fmt: skip
        question = questions.ask(ctx.session, seq=ctx.seq, call_index=ctx.call_index, call_id=ctx.call_id,
                                 question=ask.text, options=ask.options, blocking=True, surface=ctx.surface,
                                 mcp_input=pending.to_doc(), link=ask.link, round=round)  # fmt: skip
        return Suspend(question, {"status": "waiting for the operator's input", "question": ask.text})

    def argument_problem(self, args: dict[str, Any]) -> str | None:
        """What is wrong with ``args`` for this tool's schema, or None. Keys the schema does not name are refused
        too (JSON Schema lets them pass unless it says ``additionalProperties: false``), unless the schema
        explicitly allows more: what an operator approves and the server runs is only what the schema describes.
        A ``$ref`` resolves within the schema only: jsonschema would otherwise fetch any URL a server names."""
        schema = self.listed.input_schema
        try:
            validator = schemas.validator(schema)
            problems = [
                f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}"
                for e in validator.iter_errors(args)
            ]
        except jsonschema.SchemaError as exc:
            return f"{self.name} cannot be called: its server declares an invalid schema ({exc.message})"
        except Unresolvable as exc:
            return (f"{self.name} cannot be called: its server's schema refers to {exc.ref!r}, which is not "
                    "in the schema (remote references are never fetched)")  # fmt: skip
        unknown = unnamed_keys(schema, args)
        if unknown:
            named = ", ".join(sorted(named_keys(schema))) or "no arguments"
            problems.insert(0, f"unknown argument(s) {', '.join(map(repr, unknown))}: the tool's schema does not "
                               f"name them, and only named arguments are sent (it takes: {named})")  # fmt: skip
        return f"bad arguments for {self.name}: {'; '.join(problems[:5])}" if problems else None

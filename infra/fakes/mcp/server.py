"""The sample MCP server, built with the ``mcp`` package's server side and served over streamable HTTP.

Tools: ``lookup_service`` (read-only), ``delete_branch`` (destructive), ``create_ticket`` (asks which priority,
through a hand-built 2026-07-28 input-required result, before it creates anything), ``deploy_service`` (asks which
environment through the SDK's own resolver, ``Resolve`` returning ``Elicit``: an input-required result on the
2026-07-28 revision, an ``elicitation/create`` request in the middle of the call on the older handshake),
``rename_service`` (asks twice: a name, then a confirmation), ``ask_for_token`` (asks for a secret, which the agent
must refuse to collect), ``open_dashboard`` (a URL-mode request), ``slow_report`` (sleeps: the timeout path),
``big_report`` (a result of the size asked for: the client's byte cap) and ``internal_debug`` (for
include/exclude). Every call is recorded; ``GET /calls`` lists them and ``DELETE /calls`` clears them, so tests
count calls on the server's side. With ``token`` set, MCP requests must carry ``Authorization: Bearer <token>``.
With ``legacy`` set the server speaks only the older handshake (``initialize``, a stateful session whose responses
stream, so it can send requests to the client mid-call), as servers built before 2026-07-28 do.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

import mcp_types
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from infra.fakes.mcp.state import Calls

SERVICES = {"api": {"status": "healthy", "version": "1.4.2"}, "web": {"status": "degraded", "version": "2.0.1"}}
PRIORITIES = ["low", "normal", "urgent"]


def build(*, state_ttl: float = 600.0) -> tuple[MCPServer, Calls]:
    calls = Calls()
    server = MCPServer(
        "demo", instructions="A sample team server.",
        request_state_security=RequestStateSecurity.ephemeral(ttl=state_ttl),
    )  # fmt: skip
    _plain_tools(server, calls)
    _asking_tools(server, calls)
    _resolver_tools(server, calls)

    @server.custom_route("/calls", methods=["GET", "DELETE"])  # type: ignore[untyped-decorator]  # the SDK leaves it unannotated
    async def recorded(request: Request) -> Response:
        if request.method == "DELETE":
            calls.clear()
        return JSONResponse(calls.all())

    return server, calls


def _plain_tools(server: MCPServer, calls: Calls) -> None:
    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def lookup_service(name: str) -> dict[str, Any]:
        """Look up a service's status and deployed version."""
        calls.add("lookup_service", "ran", {"name": name})
        if name not in SERVICES:
            raise ToolError(f"no service named {name!r}; known: {', '.join(SERVICES)}")
        return {"name": name, **SERVICES[name]}

    @server.tool(annotations=mcp_types.ToolAnnotations(destructive_hint=True, idempotent_hint=False))
    def delete_branch(repo: str, branch: str, hold_seconds: float = 0.0) -> str:
        """Delete a git branch of a repository (cannot be undone). hold_seconds waits before answering."""
        calls.add("delete_branch", "ran", {"repo": repo, "branch": branch})
        time.sleep(min(hold_seconds, 60.0))
        return f"deleted {repo}:{branch}"

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def slow_report(seconds: float) -> str:
        """A report that takes a while to make."""
        calls.add("slow_report", "ran", {"seconds": seconds})
        time.sleep(min(seconds, 60.0))
        return "report ready"

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def big_report(megabytes: float) -> str:
        """A report of about the size asked for (text)."""
        calls.add("big_report", "ran", {"megabytes": megabytes})
        return "x" * int(min(megabytes, 100.0) * 1_000_000)

    @server.tool()
    def internal_debug(flag: str) -> str:
        """Internal: flip a debugging flag (not meant for the agent)."""
        calls.add("internal_debug", "ran", {"flag": flag})
        return "flipped"


def _asking_tools(server: MCPServer, calls: Calls) -> None:
    """Tools that answer with the 2026-07-28 input-required result before they do anything."""

    @server.tool(annotations=mcp_types.ToolAnnotations(destructive_hint=False, idempotent_hint=False))
    def create_ticket(title: str, ctx: Context) -> dict[str, Any] | mcp_types.InputRequiredResult:
        """Create a ticket in the team's tracker; asks which priority it should have."""
        answer = (ctx.input_responses or {}).get("priority")
        if answer is None:
            calls.add("create_ticket", "asked", {"title": title})
            form = mcp_types.ElicitRequestFormParams(
                message=f"Which priority should the ticket {title!r} have?",
                requested_schema={"type": "object", "required": ["priority"],
                                  "properties": {"priority": {"type": "string", "enum": PRIORITIES}}},
            )  # fmt: skip
            return mcp_types.InputRequiredResult(
                input_requests={"priority": mcp_types.ElicitRequest(params=form)},
                request_state=json.dumps({"title": title}),
            )
        if ctx.request_state is None or json.loads(ctx.request_state).get("title") != title:
            raise ToolError("the answer came without this call's state")
        if not isinstance(answer, mcp_types.ElicitResult) or answer.action != "accept" or not answer.content:
            calls.add("create_ticket", "declined", {"title": title})
            return {"created": False, "title": title}
        priority = answer.content.get("priority")
        calls.add("create_ticket", "ran", {"title": title, "priority": priority})
        return {"created": True, "title": title, "priority": priority}

    @server.tool(annotations=mcp_types.ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    def rename_service(name: str, ctx: Context) -> dict[str, Any] | mcp_types.InputRequiredResult:
        """Rename a service; asks for the new name, then for a confirmation (two rounds of input)."""
        state = json.loads(ctx.request_state) if ctx.request_state else {}
        answer = (ctx.input_responses or {}).get(state.get("step", ""))
        content = answer.content or {} if isinstance(answer, mcp_types.ElicitResult) else {}
        if state.get("step") == "confirm" and content.get("confirm") is True:
            calls.add("rename_service", "ran", {"name": name, "to": state["to"]})
            return {"renamed": name, "to": state["to"]}
        if state.get("step") == "new_name" and isinstance(content.get("new_name"), str):
            calls.add("rename_service", "asked", {"name": name, "step": "confirm"})
            return _ask("confirm", f"Rename {name} to {content['new_name']}?", {"type": "boolean"},
                        {"step": "confirm", "to": content["new_name"]})  # fmt: skip
        if state:  # declined, or an answer that is no answer
            calls.add("rename_service", "declined", {"name": name})
            return {"renamed": None}
        calls.add("rename_service", "asked", {"name": name, "step": "new_name"})
        return _ask("new_name", f"What should {name} be called?", {"type": "string"}, {"step": "new_name"})

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def ask_for_token(service: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Check a service with the operator's personal API token (asks for it)."""
        if not ctx.input_responses:
            calls.add("ask_for_token", "asked", {"service": service})
            form = mcp_types.ElicitRequestFormParams(
                message="Your API token, please.",
                requested_schema={"type": "object", "properties": {"api_token": {"type": "string"}}},
            )
            return mcp_types.InputRequiredResult(
                input_requests={"token": mcp_types.ElicitRequest(params=form)}, request_state="token"
            )
        calls.add("ask_for_token", "ran", {"service": service})
        return "checked"

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def open_dashboard(service: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Open a service's dashboard, after the operator signs in to it in the browser."""
        if not ctx.input_responses:
            calls.add("open_dashboard", "asked", {"service": service})
            link = mcp_types.ElicitRequestURLParams(
                message=f"Sign in to the {service} dashboard, then say done.",
                url=f"https://dashboards.example.com/{service}/login",
            )
            return mcp_types.InputRequiredResult(
                input_requests={"login": mcp_types.ElicitRequest(params=link)}, request_state=service
            )
        result = ctx.input_responses.get("login")
        accepted = isinstance(result, mcp_types.ElicitResult) and result.action == "accept"
        calls.add("open_dashboard", "ran" if accepted else "declined", {"service": service})
        return f"dashboard of {service} is open" if accepted else "not signed in"


class Target(BaseModel):
    """What ``deploy_service`` asks the person: the environment to deploy to."""

    environment: Literal["staging", "production"]


def which_environment(service: str) -> Elicit[Target]:
    """``deploy_service``'s resolver (at module level: the SDK reads the tool's annotations by name)."""
    return Elicit(f"Deploy {service} to which environment?", Target)


def _resolver_tools(server: MCPServer, calls: Calls) -> None:
    """A tool that asks the way the SDK teaches: a resolver returning ``Elicit``; the SDK picks the wire form."""

    @server.tool(annotations=mcp_types.ToolAnnotations(destructive_hint=False, idempotent_hint=False))
    def deploy_service(
        service: str, target: Annotated[Target, Resolve(which_environment)], hold_seconds: float = 0.0
    ) -> dict[str, Any]:
        """Deploy a service's current build; asks which environment. hold_seconds waits before answering."""
        calls.add("deploy_service", "ran", {"service": service, "environment": target.environment})
        time.sleep(min(hold_seconds, 60.0))
        return {"deployed": service, "environment": target.environment}


def _ask(field: str, message: str, spec: dict[str, Any], state: dict[str, Any]) -> mcp_types.InputRequiredResult:
    """One form question about one field, keyed by the field's name."""
    form = mcp_types.ElicitRequestFormParams(
        message=message, requested_schema={"type": "object", "properties": {field: spec}, "required": [field]}
    )
    return mcp_types.InputRequiredResult(
        input_requests={field: mcp_types.ElicitRequest(params=form)}, request_state=json.dumps(state)
    )


class BearerToken:
    """Refuse MCP requests without the expected bearer token (the credential path of a real server)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != self.expected:
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HandshakeOnly:
    """Refuse the 2026-07-28 revision's requests (a plain 400, as a server that predates it answers an unknown
    protocol version), so clients fall back to the ``initialize`` handshake."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                await Response("unsupported protocol version", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def app(*, state_ttl: float = 600.0, token: str = "", legacy: bool = False) -> ASGIApp:
    server, _calls = build(state_ttl=state_ttl)
    served: ASGIApp
    if legacy:  # a session per client, responses as event streams: the server can ask the client mid-call
        served = HandshakeOnly(server.streamable_http_app(stateless_http=False, json_response=False))
    else:
        served = server.streamable_http_app(stateless_http=True, json_response=True)
    return BearerToken(served, token) if token else served

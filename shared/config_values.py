"""How each configuration variable's text becomes its value: the parsers ``shared.config`` declares variables
with, and the error they raise. Each parser takes the variable's name and its raw text and raises ``ConfigError``
naming the variable when the text is malformed. The values that have a shape of their own are declared here
too: a tool's ``Tier`` and ``TierRule`` (``TOOL_TIERS``) and an ``McpServer`` (``MCP_SERVERS``), so the
configuration (which every entry point reads) never imports the agent that uses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from shared.errors import ProductError

PLACEHOLDER = "unset:"  # how Terraform's placeholder secret versions begin (terraform/secrets.tf)


T = TypeVar("T")


class ConfigError(ProductError):
    """A configuration variable is missing or malformed; the message names it, and so does ``variable``."""

    def __init__(self, message: str, *, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable


def text(_name: str, value: str) -> str:
    return value


def optional(_name: str, value: str) -> str | None:
    return value or None


def integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
        if not low <= number <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {number}")
        return number

    return parse


def boolean(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in {"true", "false", "1", "0", "yes", "no"}:
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return lowered in {"true", "1", "yes"}


def lenient_flag(_name: str, value: str) -> bool:
    """True for "true", "1" or "yes" in any case, False for anything else: a variable a library reads leniently."""
    return value.lower() in {"true", "1", "yes"}


def _json(name: str, value: str, shape: type[T], what: str) -> T:
    """``value`` parsed as JSON of ``shape``; ConfigError saying ``name`` must be ``what`` otherwise."""
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"{name} must be {what}: {exc}") from None
    if not isinstance(parsed, shape):
        raise ConfigError(f"{name} must be {what}, got {type(parsed).__name__}")
    return parsed


def url(name: str, value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must be an http(s) URL, got {value!r}")
    return value


def base_url(name: str, value: str) -> str:
    checked = url(name, value)
    return checked if checked.endswith("/") else checked + "/"


def id_list(_name: str, value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def slack_token(name: str, value: str) -> str:
    if not value.startswith("xox"):
        raise ConfigError(f"{name} must be a Slack token starting with 'xox'")
    return value


def queue_path(name: str, value: str) -> str:
    parts = value.split("/")
    if len(parts) != 6 or parts[0::2] != ["projects", "locations", "queues"] or not all(parts[1::2]):
        raise ConfigError(f"{name} must look like projects/P/locations/L/queues/Q, got {value!r}")
    return value


class Tier(StrEnum):
    """What a tool call needs before it runs: the values of ``TOOL_TIERS`` (``shared.agent.tools`` uses them)."""

    SAFE = "safe"  # runs at once
    APPROVE = "approve"  # runs only after an operator approves that exact call
    DENY = "deny"  # never offered to the model


_TIER_NAMES = ", ".join(Tier)


@dataclass(frozen=True)
class TierRule:
    """One ``TOOL_TIERS`` entry: a tier, and for an ``approve`` tier who may decide and how many must approve.

    With ``when`` the tier applies to a call whose every listed top-level argument equals one of its listed values;
    any other call gets ``otherwise`` (None: the tool's own tier)."""

    tier: str
    approvers: tuple[str, ...] = ()  # user (U…, W…) and user-group (S…) ids; empty: the operators. With ``tier``.
    approvals: int = 1  # distinct approvers who must approve
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    otherwise: str | None = None

    def matches(self, args: Mapping[str, Any]) -> bool:
        """True if the rule's ``tier`` (and its approvers) applies to a call with these arguments."""
        return all(name in args and _equal_one(args[name], values) for name, values in self.when)

    def tier_for(self, args: Mapping[str, Any]) -> str | None:
        """The tier this rule gives a call with these arguments (None: the rule does not decide it)."""
        return self.tier if self.matches(args) else self.otherwise

    @property
    def tiers(self) -> frozenset[str]:
        """Every tier this rule can give."""
        return frozenset({self.tier} | ({self.otherwise} if self.otherwise else set()))


def as_received(schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` as the tool receives them: an argument the call leaves out is its schema's ``default``, so a rule's
    ``when`` sees the value the tool runs with (leaving ``environment`` out of a call to a tool that defaults it to
    ``production`` does not escape a rule about production)."""
    properties = (schema or {}).get("properties")
    if not isinstance(properties, Mapping):
        return dict(args)
    defaults = {n: spec["default"] for n, spec in properties.items() if isinstance(spec, Mapping) and "default" in spec}
    return {**defaults, **args}


def _equal_one(value: Any, values: tuple[Any, ...]) -> bool:
    """Equal as JSON: ``1`` is not ``true``, ``"1"`` is not ``1``."""
    return any(type(value) is type(v) and value == v for v in values)


_RULE_KEYS = frozenset({"tier", "approvers", "approvals", "when", "otherwise"})
_APPROVER = re.compile(r"^[UWS][A-Z0-9]{2,}$")
MAX_APPROVALS = 5


def tier_map(name: str, value: str) -> dict[str, TierRule]:
    """A JSON object of tool name (or glob, like ``mcp.tickets.*``) to a tier, or to a rule object
    (``{"tier", "approvers", "approvals", "when", "otherwise"}``, README "Who may approve")."""
    parsed = _json(name, value or "{}", dict, "a JSON object of tool name to tier")
    return {str(tool): _rule(name, str(tool), rule) for tool, rule in parsed.items()}


def _conditions(
    when: Any, otherwise: str | None, bad: Callable[[str], ConfigError]
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if otherwise is not None and not when:
        raise bad("has otherwise but no when: otherwise is the tier of calls the when does not match")
    if when is not None and (not isinstance(when, dict) or not when):
        raise bad('has a when that is not an object of argument to values, e.g. {"environment": ["production"]}')
    conditions: list[tuple[str, tuple[Any, ...]]] = []
    for argument, values in (when or {}).items():
        if not isinstance(values, list) or not values or any(isinstance(v, dict | list) for v in values):
            raise bad(f"has when.{argument} that is not a non-empty list of values (strings, numbers, true/false)")
        conditions.append((str(argument), tuple(values)))
    return tuple(conditions)


def _rule(name: str, tool: str, rule: Any) -> TierRule:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{name}: the rule for {tool!r} {why}", variable=name)

    if isinstance(rule, str):
        if rule not in tuple(Tier):
            raise ConfigError(f"{name}: tool {tool!r} has tier {rule!r}; a tier is one of {_TIER_NAMES}")
        return TierRule(rule)
    if not isinstance(rule, dict):
        raise bad(f"must be a tier ({_TIER_NAMES}) or an object, got {json.dumps(rule)}")
    unknown = sorted(set(rule) - _RULE_KEYS)
    if unknown:
        raise bad(f"has unknown key(s) {', '.join(unknown)}; a rule has {', '.join(sorted(_RULE_KEYS))}")
    tier, otherwise = rule.get("tier"), rule.get("otherwise")
    if tier not in tuple(Tier):
        raise bad(f"has tier {tier!r}; a tier is one of {_TIER_NAMES}")
    if otherwise is not None and otherwise not in tuple(Tier):
        raise bad(f"has otherwise {otherwise!r}; a tier is one of {_TIER_NAMES}")
    conditions = _conditions(rule.get("when"), otherwise, bad)
    approvers = rule.get("approvers", [])
    if not isinstance(approvers, list) or any(not isinstance(a, str) or not _APPROVER.match(a) for a in approvers):
        raise bad("has approvers that are not a list of Slack user ids (U…) and user-group ids (S…)")
    approvals = rule.get("approvals", 1)
    if not isinstance(approvals, int) or isinstance(approvals, bool) or not 1 <= approvals <= MAX_APPROVALS:
        raise bad(f"has approvals {approvals!r}; it is a whole number from 1 to {MAX_APPROVALS}")
    users = [a for a in approvers if not a.startswith("S")]
    if approvers and len(users) == len(approvers) and len(set(users)) < approvals:
        raise bad(f"needs {approvals} approvals from {len(set(users))} approver(s): it could never run")
    if (approvers or approvals > 1) and tier != "approve":
        raise bad("names approvers or approvals, which apply to its tier, but its tier is not approve")
    return TierRule(tier, tuple(approvers), approvals, conditions, otherwise)


def price_map(name: str, value: str) -> dict[str, float]:
    """US dollars per million tokens, by kind (prompt, cached, output, thinking)."""
    try:
        parsed = json.loads(value)
        prices = {str(kind): float(price) for kind, price in parsed.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{name} must be a JSON object of token kind to dollars per million tokens: {exc}") from None
    return prices


MAX_PROMPTS = 4  # Slack shows at most four suggested prompts in an assistant thread


def prompt_list(name: str, value: str) -> tuple[tuple[str, str], ...]:
    """A JSON list of at most four ``{"title", "message"}`` objects: the suggested prompts of an assistant thread."""
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f'{name} must be a JSON list of {{"title", "message"}} objects: {exc}') from None
    if not isinstance(parsed, list) or len(parsed) > MAX_PROMPTS:
        raise ConfigError(f"{name} must be a JSON list of at most {MAX_PROMPTS} prompts")
    prompts = []
    for item in parsed:
        title, message = (item.get("title"), item.get("message")) if isinstance(item, dict) else (None, None)
        if not (isinstance(title, str) and title.strip() and isinstance(message, str) and message.strip()):
            raise ConfigError(f"{name}: each prompt needs a non-empty title and message, got {item!r}")
        prompts.append((title, message))
    return tuple(prompts)


def level(name: str, value: str) -> str:
    level = value.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ConfigError(f"{name} must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
    return level


# --- MCP_SERVERS: one ``McpServer`` per configured server (the MCP tools, shared.agent.tools.mcp, use them) ---
@dataclass(frozen=True)
class McpServer:
    """One remote MCP server (streamable HTTP) whose tools the agent may use."""

    name: str  # short, lower case: tools are named ``mcp.<name>.<tool>``
    url: str
    credential_env: str | None = None  # the variable holding its bearer token (Terraform fills it from a secret)
    include: frozenset[str] | None = None  # only these tools, when given
    exclude: frozenset[str] = frozenset()  # never these tools
    timeout_seconds: float = 30.0  # of one request: listing its tools, or one round of a call


_SERVER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,23}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,99}")
_SERVER_FIELDS = {"name", "url", "credential_env", "include", "exclude", "timeout_seconds"}


def mcp_server_list(name: str, value: str) -> tuple[McpServer, ...]:
    """A JSON list of ``{"name", "url", "credential_env"?, "include"?, "exclude"?}``; errors name server and field."""
    parsed = _json(name, value or "[]", list, "a JSON list of servers")
    servers: list[McpServer] = []
    for position, entry in enumerate(parsed):
        label = f"{name}: server {position + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{label} must be a JSON object, got {type(entry).__name__}")
        server = entry.get("name")
        if not isinstance(server, str) or not _SERVER_NAME.fullmatch(server):
            raise ConfigError(f"{label}: field 'name' must be 1-24 of a-z, 0-9, _ or -, starting with a letter, "
                              f"got {server!r}")  # fmt: skip
        label = f"{name}: server {server!r}"
        if any(s.name == server for s in servers):
            raise ConfigError(f"{label} is listed twice")
        unknown = sorted(set(entry) - _SERVER_FIELDS)
        if unknown:
            known = ", ".join(sorted(_SERVER_FIELDS))
            raise ConfigError(f"{label}: unknown field(s) {', '.join(unknown)}; the fields are {known}")
        address = entry.get("url")
        if not isinstance(address, str) or not address.startswith(("http://", "https://")):
            raise ConfigError(f"{label}: field 'url' must be an http(s) URL, got {address!r}")
        credential = entry.get("credential_env")
        if credential is not None and (not isinstance(credential, str) or not _ENV_NAME.fullmatch(credential)):
            raise ConfigError(f"{label}: field 'credential_env' must name an environment variable (A-Z, 0-9, _), "
                                 f"got {credential!r}")  # fmt: skip
        lists: dict[str, frozenset[str] | None] = {}
        for field_name in ("include", "exclude"):
            tools = entry.get(field_name)
            if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
                raise ConfigError(f"{label}: field {field_name!r} must be a list of tool names, got {tools!r}")
            lists[field_name] = frozenset(tools) if tools is not None else None
        timeout = entry.get("timeout_seconds", 30)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise ConfigError(f"{label}: field 'timeout_seconds' must be a number of seconds, 0 to 600, "
                                 f"got {timeout!r}")  # fmt: skip
        servers.append(McpServer(server, address, credential, lists["include"], lists["exclude"] or frozenset(),
                                 float(timeout)))  # fmt: skip
    return tuple(servers)


def mcp_credential(server: McpServer, environ: Mapping[str, str]) -> str | None:
    """The server's bearer token, from the variable its ``credential_env`` names; ConfigError if it is unusable."""
    if server.credential_env is None:
        return None
    value = environ.get(server.credential_env, "").strip()
    where = f"MCP_SERVERS: server {server.name!r}: field 'credential_env' names {server.credential_env}"
    if not value:
        raise ConfigError(f"{where}, which is not set")
    if value.startswith(PLACEHOLDER):
        raise ConfigError(f"{where}, which still holds Terraform's placeholder: put the real credential in its Secret "
                    "Manager secret (README, MCP servers)")  # fmt: skip
    return value

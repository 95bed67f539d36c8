"""How each configuration variable's text becomes its value: the parsers ``shared.config`` declares variables
with, and the error they raise. Each parser takes the variable's name and its raw text and raises ``ConfigError``
naming the variable when the text is malformed.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from shared.errors import ProductError


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


TIERS = ("safe", "approve", "deny")


def tier_map(name: str, value: str) -> dict[str, str]:
    """A JSON object of tool name (or glob, like ``mcp.tickets.*``) to tier."""
    try:
        parsed = json.loads(value or "{}")
    except ValueError as exc:
        raise ConfigError(f"{name} must be a JSON object of tool name to tier: {exc}") from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name} must be a JSON object of tool name to tier, got {type(parsed).__name__}")
    for tool, tier in parsed.items():
        if tier not in TIERS:
            raise ConfigError(f"{name}: tool {tool!r} has tier {tier!r}; a tier is one of {', '.join(TIERS)}")
    return {str(tool): str(tier) for tool, tier in parsed.items()}


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

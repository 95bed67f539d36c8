"""The one place that reads configuration.

Every variable the product reads is declared in ``VARIABLES`` with its default,
what it is for and which entry points need it. The declaration is data so that
the README and the Terraform can be checked against it by tests, and values are
read lazily: importing this module reads nothing, and a missing or malformed
variable raises ``ConfigError`` naming it the first time it is used.

google-genai and the Firestore client read their own variables
(``GEMINI_API_KEY``, ``GOOGLE_GENAI_USE_VERTEXAI``, ``GOOGLE_CLOUD_LOCATION``,
``GOOGLE_GEMINI_BASE_URL``, ``FIRESTORE_EMULATOR_HOST``); they are listed here
for documentation and the deploy checks, and read by the libraries themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

SLACK_EVENTS = "slack_events"
SLACK_INTERACTIVITY = "slack_interactivity"
AGENT_SESSION = "agent_session"
SWEEP = "sweep"
ENTRY_POINTS = (SLACK_EVENTS, SLACK_INTERACTIVITY, AGENT_SESSION, SWEEP)

_SLACK_FACING = frozenset({SLACK_EVENTS, SLACK_INTERACTIVITY})
_ALL = frozenset(ENTRY_POINTS)
_ENQUEUERS = _ALL  # ingress enqueues sessions, sessions enqueue retries, the sweep enqueues narrations
_AGENT = frozenset({AGENT_SESSION})
_INTERNAL = frozenset({AGENT_SESSION, SWEEP})


class ConfigError(RuntimeError):
    """A configuration variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: ``default`` None means it must be set."""

    name: str
    default: str | None
    help: str
    used_by: frozenset[str]
    secret: bool = False
    read_by_library: bool = False


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "SLACK_SIGNING_SECRET",
        None,
        "Slack app signing secret; every public request is verified with it.",
        _SLACK_FACING,
        secret=True,
    ),
    Variable("SLACK_BOT_TOKEN", None, "Slack bot token (xoxb-...) used for every Web API call.", _ALL, secret=True),
    Variable(
        "SLACK_API_BASE_URL",
        "https://slack.com/api/",
        "Slack Web API base URL; point it at the local fake Slack for development and tests.",
        _ALL,
    ),
    Variable("OPERATOR_USER_IDS", "", "Comma-separated Slack user ids allowed to answer operator questions.", _ALL),
    Variable(
        "OPERATOR_CHANNEL",
        "",
        "Slack channel id where operator alerts also go (unreported work that could not be narrated).",
        _INTERNAL,
    ),
    Variable("QUESTION_REMIND_HOURS", "24", "Age at which an open question gets its one reminder.", frozenset({SWEEP})),
    Variable(
        "QUESTION_ABANDON_HOURS",
        "48",
        "Further time after the reminder age at which a still-open question is abandoned.",
        frozenset({SWEEP}),
    ),
    Variable(
        "STALE_LEASE_MINUTES",
        "60",
        "How long past its lease a running session must be before the sweep treats its worker as dead.",
        frozenset({SWEEP}),
    ),
    Variable("SWEEP_PAGE_SIZE", "200", "Documents the sweep reads per page of each query.", frozenset({SWEEP})),
    Variable(
        "ALLOW_REQUESTER_ANSWERS",
        "false",
        "'true' lets the person who started a session answer its questions too, besides the operators.",
        _SLACK_FACING,
    ),
    Variable("TASKS_QUEUE", None, "Full Cloud Tasks queue path: projects/P/locations/L/queues/Q.", _ENQUEUERS),
    Variable("TASKS_TARGET_URL", None, "URL of the agent_session function that tasks are sent to.", _ENQUEUERS),
    Variable(
        "TASKS_SERVICE_ACCOUNT",
        "",
        "Service account email Cloud Tasks signs OIDC tokens as; empty sends no token (local runs).",
        _ENQUEUERS,
    ),
    Variable(
        "TASKS_DISPATCH_DEADLINE_SECONDS",
        "900",
        "How long Cloud Tasks waits for agent_session (15..1800); keep it above the session wall budget.",
        _ENQUEUERS,
    ),
    Variable(
        "TASKS_EMULATOR_HOST",
        "",
        "host:port of a Cloud Tasks emulator; when set, tasks go there over an insecure channel.",
        _ENQUEUERS,
    ),
    Variable(
        "EVENT_TTL_HOURS",
        "72",
        "How long Slack event de-duplication records are kept before Firestore's TTL deletes them.",
        _SLACK_FACING,
    ),
    Variable("LOG_LEVEL", "INFO", "Python log level for the JSON logs.", _ALL),
    Variable(
        "GOOGLE_CLOUD_PROJECT",
        "",
        "Project for Firestore (and Vertex AI); empty lets the client infer it from the runtime.",
        _ALL,
        read_by_library=True,
    ),
    Variable("FIRESTORE_DATABASE", "(default)", "Firestore database id.", _ALL),
    Variable("GEMINI_MODEL", "gemini-3.8-flash", "Gemini model the agent uses (a current Flash model).", _AGENT),
    Variable("SESSION_MAX_TURNS", "20", "Model turns one session may take before it wraps up.", _AGENT),
    Variable("SESSION_MAX_TOOL_CALLS", "40", "Tool calls one session may make before it wraps up.", _AGENT),
    Variable(
        "SESSION_WALL_SECONDS",
        "420",
        "Wall time one session may run before it wraps up; keep it well below the dispatch deadline.",
        _AGENT,
    ),
    Variable(
        "SESSION_LEASE_SECONDS",
        "240",
        "How long a claimed session stays locked without progress before another delivery may take it over.",
        _AGENT,
    ),
    Variable("MODEL_TIMEOUT_SECONDS", "60", "Timeout of one model request.", _AGENT),
    Variable("MODEL_RETRY_ATTEMPTS", "3", "Attempts per model request (429, 5xx and timeouts are retried).", _AGENT),
    Variable(
        "MODEL_CONTEXT_TOKENS",
        "900000",
        "Estimated prompt size above which older tool results are shortened before a model call.",
        _AGENT,
    ),
    Variable(
        "REQUIRE_OIDC",
        "true",
        "Verify the Cloud Tasks / Cloud Scheduler OIDC token on agent_session and sweep; 'false' for local runs only.",
        _INTERNAL,
    ),
    Variable(
        "OIDC_AUDIENCE",
        "",
        "Audience expected in OIDC tokens; empty means the function's own URL (TASKS_TARGET_URL for agent_session).",
        _INTERNAL,
    ),
    Variable(
        "SCHEDULER_SERVICE_ACCOUNT",
        "",
        "Service account Cloud Scheduler signs the sweep's OIDC token as.",
        frozenset({SWEEP}),
    ),
    Variable(
        "GEMINI_API_KEY",
        "",
        "Gemini API key; read by google-genai. Unused with Vertex AI.",
        _AGENT,
        secret=True,
        read_by_library=True,
    ),
    Variable(
        "GOOGLE_GENAI_USE_VERTEXAI",
        "",
        "'true' to call Gemini through Vertex AI with the function's identity.",
        _AGENT,
        read_by_library=True,
    ),
    Variable(
        "GOOGLE_CLOUD_LOCATION",
        "",
        "Vertex AI location (e.g. us-central1); read by google-genai.",
        _AGENT,
        read_by_library=True,
    ),
    Variable(
        "GOOGLE_GEMINI_BASE_URL",
        "",
        "Override of the Gemini API URL (the local stub); read by google-genai.",
        _AGENT,
        read_by_library=True,
    ),
    Variable(
        "FIRESTORE_EMULATOR_HOST",
        "",
        "host:port of the Firestore emulator; read by the Firestore client itself.",
        _ALL,
        read_by_library=True,
    ),
)

_BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}


class Settings:
    """Typed, validated views of the environment, each read on first access."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str:
        """The value of a declared variable, its default, or ConfigError if it is required and unset."""
        var = _BY_NAME[name]
        value = self._environ.get(name, "").strip()
        if value:
            return value
        if var.default is None:
            raise ConfigError(f"{name} is not set: {var.help}")
        return var.default

    def _int(self, name: str, low: int, high: int) -> int:
        text = self.raw(name)
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
        return value

    def _bool(self, name: str) -> bool:
        text = self.raw(name).lower()
        if text not in {"true", "false", "1", "0", "yes", "no"}:
            raise ConfigError(f"{name} must be true or false, got {text!r}")
        return text in {"true", "1", "yes"}

    @cached_property
    def slack_signing_secret(self) -> str:
        return self.raw("SLACK_SIGNING_SECRET")

    @cached_property
    def slack_bot_token(self) -> str:
        token = self.raw("SLACK_BOT_TOKEN")
        if not token.startswith("xox"):
            raise ConfigError("SLACK_BOT_TOKEN must be a Slack token starting with 'xox'")
        return token

    @cached_property
    def slack_api_base_url(self) -> str:
        url = self.raw("SLACK_API_BASE_URL")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"SLACK_API_BASE_URL must be an http(s) URL, got {url!r}")
        return url if url.endswith("/") else url + "/"

    @cached_property
    def operator_user_ids(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.raw("OPERATOR_USER_IDS").split(",") if part.strip())

    @cached_property
    def operator_channel(self) -> str:
        return self.raw("OPERATOR_CHANNEL")

    @cached_property
    def question_remind_hours(self) -> int:
        return self._int("QUESTION_REMIND_HOURS", 1, 24 * 30)

    @cached_property
    def question_abandon_hours(self) -> int:
        return self._int("QUESTION_ABANDON_HOURS", 1, 24 * 90)

    @cached_property
    def stale_lease_minutes(self) -> int:
        return self._int("STALE_LEASE_MINUTES", 1, 24 * 60)

    @cached_property
    def sweep_page_size(self) -> int:
        return self._int("SWEEP_PAGE_SIZE", 10, 1000)

    @cached_property
    def allow_requester_answers(self) -> bool:
        return self._bool("ALLOW_REQUESTER_ANSWERS")

    @cached_property
    def tasks_queue(self) -> str:
        path = self.raw("TASKS_QUEUE")
        parts = path.split("/")
        if len(parts) != 6 or parts[0::2] != ["projects", "locations", "queues"] or not all(parts[1::2]):
            raise ConfigError(f"TASKS_QUEUE must look like projects/P/locations/L/queues/Q, got {path!r}")
        return path

    @cached_property
    def tasks_target_url(self) -> str:
        url = self.raw("TASKS_TARGET_URL")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"TASKS_TARGET_URL must be an http(s) URL, got {url!r}")
        return url

    @cached_property
    def tasks_service_account(self) -> str:
        return self.raw("TASKS_SERVICE_ACCOUNT")

    @cached_property
    def tasks_dispatch_deadline_seconds(self) -> int:
        # Cloud Tasks accepts 15 seconds to 30 minutes for HTTP targets.
        return self._int("TASKS_DISPATCH_DEADLINE_SECONDS", 15, 1800)

    @cached_property
    def tasks_emulator_host(self) -> str:
        return self.raw("TASKS_EMULATOR_HOST")

    @cached_property
    def event_ttl_hours(self) -> int:
        return self._int("EVENT_TTL_HOURS", 1, 24 * 365)

    @cached_property
    def log_level(self) -> str:
        level = self.raw("LOG_LEVEL").upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ConfigError(f"LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
        return level

    @cached_property
    def gemini_model(self) -> str:
        return self.raw("GEMINI_MODEL")

    @cached_property
    def session_max_turns(self) -> int:
        return self._int("SESSION_MAX_TURNS", 1, 200)

    @cached_property
    def session_max_tool_calls(self) -> int:
        return self._int("SESSION_MAX_TOOL_CALLS", 0, 1000)

    @cached_property
    def session_wall_seconds(self) -> int:
        wall = self._int("SESSION_WALL_SECONDS", 10, 1700)
        if wall >= self.tasks_dispatch_deadline_seconds:
            raise ConfigError(
                f"SESSION_WALL_SECONDS ({wall}) must stay below TASKS_DISPATCH_DEADLINE_SECONDS "
                f"({self.tasks_dispatch_deadline_seconds}) so a session wraps up before Cloud Tasks gives up on it"
            )
        return wall

    @cached_property
    def session_lease_seconds(self) -> int:
        return self._int("SESSION_LEASE_SECONDS", 5, 3600)

    @cached_property
    def model_timeout_seconds(self) -> int:
        return self._int("MODEL_TIMEOUT_SECONDS", 1, 600)

    @cached_property
    def model_retry_attempts(self) -> int:
        return self._int("MODEL_RETRY_ATTEMPTS", 1, 10)

    @cached_property
    def model_context_tokens(self) -> int:
        return self._int("MODEL_CONTEXT_TOKENS", 1000, 10_000_000)

    @cached_property
    def require_oidc(self) -> bool:
        return self._bool("REQUIRE_OIDC")

    @cached_property
    def oidc_audience(self) -> str:
        return self.raw("OIDC_AUDIENCE")

    @cached_property
    def scheduler_service_account(self) -> str:
        return self.raw("SCHEDULER_SERVICE_ACCOUNT")

    @cached_property
    def google_cloud_project(self) -> str | None:
        return self.raw("GOOGLE_CLOUD_PROJECT") or None

    @cached_property
    def firestore_database(self) -> str:
        return self.raw("FIRESTORE_DATABASE")


_settings: Settings | None = None


def settings() -> Settings:
    """The process-wide settings, created on first use."""
    global _settings  # noqa: PLW0603 - a lazy module global, as in the functions-framework samples
    if _settings is None:
        _settings = Settings()
    return _settings


def reset() -> None:
    """Forget cached values so the next use re-reads the environment (tests)."""
    global _settings  # noqa: PLW0603
    _settings = None


def required_for(entry_point: str) -> list[Variable]:
    """Variables without a default that ``entry_point`` needs; the deploy must set them."""
    return [v for v in VARIABLES if entry_point in v.used_by and v.default is None]

"""The one place that reads configuration: every variable declared once, with its parser, help and users.

Each variable is one ``Var`` on ``Settings``: the declaration (name, default, help text, the entry points that use
it, whether it is secret, whether a library reads it itself) and the typed, validated, cached attribute in one.
``VARIABLES`` lists them all, so the README and the Terraform are checked against them by tests. Values are read
lazily: importing this module reads nothing, and a missing or malformed variable raises ``ConfigError`` naming it
the first time it is used. A secret still holding Terraform's placeholder (``unset: …``) is refused, naming its
Secret Manager secret and the command that sets it.

google-genai and the Firestore client read their own variables (``GEMINI_API_KEY``, ``GOOGLE_GENAI_USE_VERTEXAI``,
``GOOGLE_CLOUD_LOCATION``, ``GOOGLE_GEMINI_BASE_URL``, ``FIRESTORE_EMULATOR_HOST``); they are declared here for
the documentation and the deploy checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from shared import config_values
from shared.config_values import (
    PLACEHOLDER,
    McpServer,
    base_url,
    boolean,
    id_list,
    lenient_flag,
    level,
    mcp_server_list,
    optional,
    price_map,
    prompt_list,
    queue_path,
    slack_token,
    text,
    tier_map,
    url,
)

# Re-exported: callers name them as ``config.ConfigError`` and ``config.integer(...)``.
ConfigError = config_values.ConfigError
integer = config_values.integer

SLACK_EVENTS = "slack_events"
SLACK_INTERACTIVITY = "slack_interactivity"
AGENT_SESSION = "agent_session"
SWEEP = "sweep"
ENTRY_POINTS = (SLACK_EVENTS, SLACK_INTERACTIVITY, AGENT_SESSION, SWEEP)

_SLACK_FACING = frozenset({SLACK_EVENTS, SLACK_INTERACTIVITY})
_ALL = frozenset(ENTRY_POINTS)
_ENQUEUERS = _ALL  # ingress enqueues sessions, sessions enqueue retries, the sweep enqueues narrations
_AGENT = frozenset({AGENT_SESSION})
_LIMITED = frozenset({SLACK_EVENTS})  # the ingress counts sessions (an end releases its stored count, reading none)
_INTERNAL = frozenset({AGENT_SESSION, SWEEP})
_SWEEP = frozenset({SWEEP})

# Keys in alphabetical order, as Terraform's jsonencode writes them (terraform/variables.tf has the same list).
ASSISTANT_PROMPTS_DEFAULT = (
    '[{"message":"What can you do, and which tools can you use?","title":"What can you do?"},'
    '{"message":"Fetch https://www.example.com and summarise it in three bullet points.","title":"Summarise a page"},'
    '{"message":"Help me plan a change: ask me what you need to know first.","title":"Plan a change"}]'
)

# The whole placeholder text, which names its own secret: terraform/secrets.tf's secret_data.
_PLACEHOLDER_TEXT = re.compile(r"unset: add the real value with gcloud secrets versions add ([a-z][a-z0-9-]{0,254})")

T = TypeVar("T")


class NotSet(ConfigError):
    """A required variable is unset (or empty)."""


class PlaceholderSecret(ConfigError):
    """A secret still holds Terraform's placeholder text: the entry point refuses every request until it is set."""


class Var(Generic[T]):
    """One environment variable, declared once: ``default`` None means it must be set.

    As a class attribute of ``Settings`` it is also the typed value: ``settings().session_max_turns`` reads
    ``SESSION_MAX_TURNS`` on first use, parses and checks it, and caches it on that ``Settings``. The attribute is
    the variable's name in lower case (checked when the class is built).
    """

    def __init__(
        self,
        name: str,
        default: str | None,
        help: str,
        used_by: frozenset[str],
        parse: Callable[[str, str], T],
        *,
        secret: bool = False,
        read_by_library: bool = False,
        check: Callable[[Settings, T], None] | None = None,
    ) -> None:
        self.name = name
        self.default = default
        self.help = help
        self.used_by = used_by
        self.parse = parse
        self.secret = secret
        self.read_by_library = read_by_library
        self.check = check  # a rule across variables, run when this one is first read

    def __set_name__(self, owner: type, attribute: str) -> None:
        if attribute != self.name.lower():
            raise TypeError(f"{owner.__name__}.{attribute} declares {self.name}; name it {self.name.lower()}")

    @property
    def secret_suffix(self) -> str:
        """What follows the prefix in the id of the Secret Manager secret a secret variable comes from (terraform/
        main.tf's ``local.secrets``: ``SLACK_BOT_TOKEN = "${var.name_prefix}-slack-bot-token"``)."""
        return self.name.lower().replace("_", "-")

    @property
    def secret_id(self) -> str:
        """That secret's id with the prefix left as ``<name_prefix>``, for messages."""
        return f"<name_prefix>-{self.secret_suffix}"

    @overload
    def __get__(self, settings: None, owner: type) -> Var[T]: ...

    @overload
    def __get__(self, settings: Settings, owner: type) -> T: ...

    def __get__(self, settings: Settings | None, owner: type) -> Var[T] | T:
        if settings is None:
            return self
        return self.read(settings)

    def read(self, settings: Settings) -> T:
        """The parsed, checked value in ``settings`` (cached there), or ConfigError naming this variable."""
        if self.name not in settings._values:
            raw = settings.raw(self.name)
            try:
                parsed = self.parse(self.name, raw)
                if self.check is not None:
                    self.check(settings, parsed)
            except ConfigError as exc:
                if self.secret and raw in str(exc):  # a secret's value never reaches a message or a log
                    message = str(exc).replace(repr(raw), "<redacted>")
                    if raw in message:
                        message = f"{self.name} is malformed (its value is a secret and not shown)"
                    raise ConfigError(message, variable=self.name) from None
                exc.variable = exc.variable or self.name
                raise
            settings._values[self.name] = parsed
        value: T = settings._values[self.name]
        return value

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


def _placeholder_fix(var: Var[Any], value: str) -> str:
    """What to do about a secret holding the placeholder. The placeholder is public text (terraform/secrets.tf) and
    names its own secret; any other ``unset:`` text gets the secret's id as Terraform forms it."""
    named = _PLACEHOLDER_TEXT.fullmatch(value)
    if named:
        secret = named.group(1)
        where = f"Secret Manager secret {secret}"
    else:
        secret = var.secret_id
        where = (
            f'Secret Manager secret {secret} (Terraform names it "${{var.name_prefix}}-{var.secret_suffix}"; '
            "`terraform -chdir=terraform output secret_ids` lists the ids)"
        )
    return (
        f"{var.name} still holds Terraform's placeholder, not the real value: put it in its {where} with "
        f'`printf %s "$VALUE" | gcloud secrets versions add {secret} --data-file=-`, then run `make restart` '
        "(README, Deploy, step 5)."
    )


def _below_deadline(settings: Settings, wall: int) -> None:
    if wall >= settings.tasks_dispatch_deadline_seconds:
        raise ConfigError(
            f"SESSION_WALL_SECONDS ({wall}) must stay below TASKS_DISPATCH_DEADLINE_SECONDS "
            f"({settings.tasks_dispatch_deadline_seconds}) so a session wraps up before Cloud Tasks gives up on it"
        )


class Settings:
    """Typed, validated views of the environment, each read on first access."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._values: dict[str, Any] = {}

    def raw(self, name: str) -> str:
        """The value of a declared variable, its default, or ConfigError if it is required and unset (or a secret
        still holding Terraform's placeholder)."""
        var = BY_NAME[name]
        value = self._environ.get(name, "").strip()
        if var.secret and value.startswith(PLACEHOLDER):
            raise PlaceholderSecret(_placeholder_fix(var, value), variable=name)
        if value:
            return value
        if var.default is None:
            raise NotSet(f"{name} is not set: {var.help}", variable=name)
        return var.default

    # --- Slack ---
    slack_signing_secret = Var(
        "SLACK_SIGNING_SECRET", None, "Slack app signing secret; every public request is verified with it.",
        _SLACK_FACING, text, secret=True,
    )  # fmt: skip
    slack_bot_token = Var(
        "SLACK_BOT_TOKEN", None, "Slack bot token (xoxb-...) used for every Web API call.", _ALL, slack_token,
        secret=True,
    )  # fmt: skip
    slack_api_base_url = Var(
        "SLACK_API_BASE_URL", "https://slack.com/api/",
        "Slack Web API base URL; point it at the local fake Slack for development and tests.", _ALL, base_url,
    )  # fmt: skip
    operator_user_ids = Var(
        "OPERATOR_USER_IDS", "", "Comma-separated Slack user ids allowed to answer operator questions.", _ALL, id_list
    )
    operator_channel = Var(
        "OPERATOR_CHANNEL", "",
        "Slack channel id where operator alerts also go (unreported work that could not be narrated), and where "
        "approval cards asked in a direct message are posted.", _INTERNAL,
        text,
    )  # fmt: skip
    question_mentions_operators = Var(
        "QUESTION_MENTIONS_OPERATORS", "true",
        "'true' mentions the operators in every question post, so they are notified when it is asked.", _AGENT,
        boolean,
    )  # fmt: skip
    # --- the sweep ---
    question_remind_hours = Var(
        "QUESTION_REMIND_HOURS", "24", "Age at which an open question gets its one reminder.", _INTERNAL,
        integer(1, 24 * 30),
    )  # fmt: skip
    question_abandon_hours = Var(
        "QUESTION_ABANDON_HOURS", "48",
        "Further time after the reminder age at which a still-open question (or approval) is abandoned; an approval "
        "card says when.", _INTERNAL,
        integer(1, 24 * 90),
    )  # fmt: skip
    stale_lease_minutes = Var(
        "STALE_LEASE_MINUTES", "60",
        "How long past its lease a running session must be before the sweep treats its worker as dead.", _SWEEP,
        integer(1, 24 * 60),
    )  # fmt: skip
    sweep_page_size = Var(
        "SWEEP_PAGE_SIZE", "200", "Documents the sweep reads per page of each query.", _SWEEP, integer(10, 1000)
    )
    allow_requester_approvals = Var(
        "ALLOW_REQUESTER_APPROVALS", "false",
        "'true' lets the person who started a session approve or deny its risky calls too, besides the operators.",
        _SLACK_FACING, boolean,
    )  # fmt: skip
    tool_tiers = Var(
        "TOOL_TIERS", "{}",
        'JSON object of tool name (or glob, e.g. "mcp.tickets.*") to a tier (safe, approve or deny) or a rule '
        '{"tier", "approvers", "approvals", "when", "otherwise"} (README, Who may approve); wins over the tool\'s own '
        "tier.",
        _AGENT, tier_map,
    )  # fmt: skip
    mcp_servers = Var(
        "MCP_SERVERS", "[]",
        "JSON list of MCP servers whose tools the agent may use as mcp.<name>.<tool> (README, MCP servers).",
        _AGENT, mcp_server_list,
    )  # fmt: skip
    assistant_prompts = Var(
        "ASSISTANT_PROMPTS", ASSISTANT_PROMPTS_DEFAULT,
        'JSON list of at most 4 {"message", "title"} objects: the suggested prompts shown when someone opens the '
        "app in Slack's assistant pane; [] shows none.", frozenset({SLACK_EVENTS}), prompt_list,
    )  # fmt: skip
    allow_requester_answers = Var(
        "ALLOW_REQUESTER_ANSWERS", "false",
        "'true' lets the person who started a session answer its questions too, besides the operators.",
        _SLACK_FACING | _AGENT, boolean,
    )  # fmt: skip
    # --- Cloud Tasks ---
    tasks_queue = Var(
        "TASKS_QUEUE", None, "Full Cloud Tasks queue path: projects/P/locations/L/queues/Q.", _ENQUEUERS, queue_path
    )
    tasks_target_url = Var(
        "TASKS_TARGET_URL", None, "URL of the agent_session function that tasks are sent to.", _ENQUEUERS, url
    )
    tasks_service_account = Var(
        "TASKS_SERVICE_ACCOUNT", "",
        "Service account email Cloud Tasks signs OIDC tokens as; empty sends no token (local runs).", _ENQUEUERS,
        text,
    )  # fmt: skip
    tasks_dispatch_deadline_seconds = Var(
        "TASKS_DISPATCH_DEADLINE_SECONDS", "900",
        "How long Cloud Tasks waits for agent_session (15..1800); keep it above the session wall budget.",
        _ENQUEUERS, integer(15, 1800),
    )  # fmt: skip
    tasks_emulator_host = Var(
        "TASKS_EMULATOR_HOST", "",
        "host:port of a Cloud Tasks emulator; when set, tasks go there over an insecure channel.", _ENQUEUERS, text,
    )  # fmt: skip
    event_ttl_hours = Var(
        "EVENT_TTL_HOURS", "72",
        "How long de-duplication records (Slack events, alerts, reminders) are kept before Firestore's TTL deletes "
        "them.", _ALL, integer(1, 24 * 365),
    )  # fmt: skip
    log_level = Var("LOG_LEVEL", "INFO", "Python log level for the JSON logs.", _ALL, level)
    # --- Firestore ---
    google_cloud_project = Var(
        "GOOGLE_CLOUD_PROJECT", "",
        "Project for Firestore (and Vertex AI); empty lets the client infer it from the runtime.", _ALL, optional,
        read_by_library=True,
    )  # fmt: skip
    firestore_database = Var("FIRESTORE_DATABASE", "(default)", "Firestore database id.", _ALL, text)
    # --- the agent ---
    gemini_model = Var(
        "GEMINI_MODEL", "gemini-3.8-flash", "Gemini model the agent uses (a current Flash model).", _AGENT, text
    )
    session_max_turns = Var(
        "SESSION_MAX_TURNS", "20", "Model turns one session may take before it wraps up.", _AGENT, integer(1, 200)
    )
    session_max_tool_calls = Var(
        "SESSION_MAX_TOOL_CALLS", "40", "Tool calls one session may make before it wraps up.", _AGENT,
        integer(0, 1000),
    )  # fmt: skip
    session_wall_seconds = Var(
        "SESSION_WALL_SECONDS", "420",
        "Wall time one session may run before it wraps up; keep it well below the dispatch deadline.", _AGENT,
        integer(10, 1700), check=_below_deadline,
    )  # fmt: skip
    session_lease_seconds = Var(
        "SESSION_LEASE_SECONDS", "60",
        "How long a claimed session stays locked after its worker's last heartbeat (every quarter of it, during model "
        "calls and tools too) before another delivery may take it over: how soon a dead worker is known.",
        _AGENT, integer(5, 3600),
    )  # fmt: skip
    fetch_max_per_session = Var(
        "FETCH_MAX_PER_SESSION", "10", "fetch_url calls one session may make (egress is bounded).", _AGENT,
        integer(0, 1000),
    )  # fmt: skip
    delegate_max_depth = Var(
        "DELEGATE_MAX_DEPTH", "2", "How deep delegation may go: 1 lets a session start children, 2 grandchildren.",
        _AGENT, integer(0, 5),
    )  # fmt: skip
    user_sessions_per_hour = Var(
        "USER_SESSIONS_PER_HOUR", "20", "Sessions one person may start per hour (mentions and DMs); 0: no limit.",
        _LIMITED, integer(0, 100000),
    )  # fmt: skip
    channel_sessions_per_hour = Var(
        "CHANNEL_SESSIONS_PER_HOUR", "60", "Sessions that may start per hour in one channel; 0: no limit.", _LIMITED,
        integer(0, 100000),
    )  # fmt: skip
    user_running_sessions = Var(
        "USER_RUNNING_SESSIONS", "3", "Sessions one person may have running at once; 0: no limit.", _LIMITED,
        integer(0, 1000),
    )  # fmt: skip
    channel_running_sessions = Var(
        "CHANNEL_RUNNING_SESSIONS", "6", "Sessions that may run at once in one channel; 0: no limit.", _LIMITED,
        integer(0, 1000),
    )  # fmt: skip
    user_daily_tokens = Var(
        "USER_DAILY_TOKENS", "5000000",
        "Tokens one person's sessions may spend per day (UTC); a session that would cross it stops and asks an "
        "operator whether to go on. 0: no budget.", _AGENT, integer(0, 10**12),
    )  # fmt: skip
    workspace_daily_tokens = Var(
        "WORKSPACE_DAILY_TOKENS", "50000000",
        "Tokens all sessions may spend per day (UTC), the same way. 0: no budget.", _AGENT, integer(0, 10**13),
    )  # fmt: skip
    child_max_turns = Var(
        "CHILD_MAX_TURNS", "10", "Model turns one delegated child may take (less if its tree's budget has less).",
        _AGENT, integer(1, 200),
    )  # fmt: skip
    child_max_tool_calls = Var(
        "CHILD_MAX_TOOL_CALLS", "20", "Tool calls one delegated child may make (less if its tree's budget has less).",
        _AGENT, integer(0, 1000),
    )  # fmt: skip
    tree_max_turns = Var(
        "TREE_MAX_TURNS", "100",
        "Model turns a whole tree of delegated sessions may take: the root's own budget plus every child's "
        "allotment; a delegation that finds none left is refused.", _AGENT, integer(1, 10000),
    )  # fmt: skip
    tree_max_tool_calls = Var(
        "TREE_MAX_TOOL_CALLS", "200", "Tool calls a whole tree of delegated sessions may make, counted the same way.",
        _AGENT, integer(0, 100000),
    )  # fmt: skip
    slack_stream = Var(
        "SLACK_STREAM", "true",
        "'true' streams a final answer into its message as it is generated (chat.startStream), the session's tool "
        "steps shown as task cards above it; 'false' posts answers whole.", _AGENT, boolean,
    )  # fmt: skip
    slack_stream_buffer_chars = Var(
        "SLACK_STREAM_BUFFER_CHARS", "200",
        "Answer text gathered before each chat.appendStream (the first piece goes at once; text waiting a second "
        "goes with the next piece): fewer makes smoother text and more Slack calls.", _AGENT, integer(1, 12000),
    )  # fmt: skip
    slack_stream_seconds = Var(
        "SLACK_STREAM_SECONDS", "300",
        "How long Slack keeps a streamed message open (five minutes): a session still streaming when a tenth of it "
        "is left (at most 30 s) goes on in a new streamed message in the thread, its task cards carried over.",
        _AGENT, integer(5, 3600),
    )  # fmt: skip
    model_timeout_seconds = Var("MODEL_TIMEOUT_SECONDS", "60", "Timeout of one model request.", _AGENT, integer(1, 600))
    model_retry_attempts = Var(
        "MODEL_RETRY_ATTEMPTS", "3", "Attempts per model request (429, 5xx and timeouts are retried).", _AGENT,
        integer(1, 10),
    )  # fmt: skip
    model_context_tokens = Var(
        "MODEL_CONTEXT_TOKENS", "900000",
        "Estimated prompt size above which older tool results are shortened before a model call.", _AGENT,
        integer(1000, 10_000_000),
    )  # fmt: skip
    token_prices = Var(
        "TOKEN_PRICES", '{"prompt": 0.30, "cached": 0.03, "output": 2.50, "thinking": 2.50}',
        "US dollars per million tokens by kind, for the cost estimates of `make usage` (the model's list price).",
        frozenset(), price_map,
    )  # fmt: skip
    # --- OIDC ---
    require_oidc = Var(
        "REQUIRE_OIDC", "true",
        "Verify the Cloud Tasks / Cloud Scheduler OIDC token on agent_session and sweep; 'false' for local runs only.",
        _INTERNAL, boolean,
    )  # fmt: skip
    oidc_audience = Var(
        "OIDC_AUDIENCE", "",
        "Audience expected in OIDC tokens; empty means the function's own URL (TASKS_TARGET_URL for agent_session).",
        _INTERNAL, text,
    )  # fmt: skip
    scheduler_service_account = Var(
        "SCHEDULER_SERVICE_ACCOUNT", "", "Service account Cloud Scheduler signs the sweep's OIDC token as.", _SWEEP,
        text,
    )  # fmt: skip
    # --- read by the libraries themselves ---
    gemini_api_key = Var(
        "GEMINI_API_KEY", "", "Gemini API key; read by google-genai. Unused with Vertex AI.", _AGENT, text,
        secret=True, read_by_library=True,
    )  # fmt: skip
    google_genai_use_vertexai = Var(
        "GOOGLE_GENAI_USE_VERTEXAI", "", "'true' to call Gemini through Vertex AI with the function's identity.",
        _AGENT, lenient_flag, read_by_library=True,
    )  # fmt: skip
    google_cloud_location = Var(
        "GOOGLE_CLOUD_LOCATION", "", "Vertex AI location (e.g. us-central1); read by google-genai.", _AGENT, text,
        read_by_library=True,
    )  # fmt: skip
    google_gemini_base_url = Var(
        "GOOGLE_GEMINI_BASE_URL", "", "Override of the Gemini API URL (the local stub); read by google-genai.",
        _AGENT, text, read_by_library=True,
    )  # fmt: skip
    firestore_emulator_host = Var(
        "FIRESTORE_EMULATOR_HOST", "", "host:port of the Firestore emulator; read by the Firestore client itself.",
        _ALL, text, read_by_library=True,
    )  # fmt: skip


VARIABLES: tuple[Var[Any], ...] = tuple(v for v in vars(Settings).values() if isinstance(v, Var))
BY_NAME: dict[str, Var[Any]] = {v.name: v for v in VARIABLES}
if len(BY_NAME) != len(VARIABLES):
    _names = [v.name for v in VARIABLES]
    raise TypeError(f"declared more than once: {sorted({name for name in _names if _names.count(name) > 1})}")

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


def mcp_credential(server: McpServer) -> str | None:
    """An MCP server's bearer token, from the variable its ``credential_env`` names (never logged)."""
    return config_values.mcp_credential(server, settings()._environ)


def check_rules(entry_point: str) -> None:
    """ConfigError before ``entry_point`` serves anything while a rule it enforces is malformed (``TOOL_TIERS``:
    the message names the rule), so a bad rule stops it at start-up instead of at the first call it would decide."""
    for var in (Settings.tool_tiers,):
        if entry_point in var.used_by:
            var.read(settings())


def required_for(entry_point: str) -> list[Var[Any]]:
    """Variables without a default that ``entry_point`` needs; the deploy must set them."""
    return [v for v in VARIABLES if entry_point in v.used_by and v.default is None]


def secrets_for(entry_point: str) -> list[Var[Any]]:
    """The secrets ``entry_point`` uses, checked before it serves anything: those it reads itself, and those a
    library reads (``GEMINI_API_KEY``), since the placeholder is no key whoever reads it."""
    return [v for v in VARIABLES if entry_point in v.used_by and v.secret]

"""Configuration: lazy, validated, documented; importing the product has no side effects."""

from __future__ import annotations

import functools
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared import config, config_values, deps, logs
from shared.errors import ProductError
from shared.logs import JsonFormatter, session_context
from tests.function_apps import function_client as app_for

ROOT = Path(__file__).resolve().parents[2]


def test_missing_required_variable_names_it() -> None:
    settings = config.Settings({})
    with pytest.raises(config.ConfigError, match="SLACK_SIGNING_SECRET is not set"):
        _ = settings.slack_signing_secret
    with pytest.raises(config.ConfigError, match="TASKS_QUEUE is not set"):
        _ = settings.tasks_queue


@pytest.mark.parametrize(
    ("name", "value", "attribute"),
    [
        ("TASKS_QUEUE", "my-queue", "tasks_queue"),
        ("TASKS_QUEUE", "projects/p/locations//queues/q", "tasks_queue"),
        ("TASKS_TARGET_URL", "agent_session", "tasks_target_url"),
        ("TASKS_DISPATCH_DEADLINE_SECONDS", "forever", "tasks_dispatch_deadline_seconds"),
        ("TASKS_DISPATCH_DEADLINE_SECONDS", "3600", "tasks_dispatch_deadline_seconds"),
        ("SLACK_BOT_TOKEN", "not-a-token", "slack_bot_token"),
        ("SLACK_API_BASE_URL", "slack.com/api", "slack_api_base_url"),
        ("LOG_LEVEL", "LOUD", "log_level"),
        ("SESSION_MAX_TURNS", "0", "session_max_turns"),
        ("ALLOW_REQUESTER_ANSWERS", "maybe", "allow_requester_answers"),
        ("REQUIRE_OIDC", "sometimes", "require_oidc"),
        ("TOOL_TIERS", '{"fetch_url": "maybe"}', "tool_tiers"),
        ("TOOL_TIERS", "[1]", "tool_tiers"),
        ("TOKEN_PRICES", "cheap", "token_prices"),
        ("ASSISTANT_PROMPTS", "ask me", "assistant_prompts"),
        ("ASSISTANT_PROMPTS", '[{"title": "t"}]', "assistant_prompts"),
        ("ASSISTANT_PROMPTS", '[{"title": " ", "message": "m"}]', "assistant_prompts"),
        ("ASSISTANT_PROMPTS", '{"title": "t", "message": "m"}', "assistant_prompts"),
        ("ASSISTANT_PROMPTS", "[" + ",".join(['{"title": "t", "message": "m"}'] * 5) + "]", "assistant_prompts"),
    ],
)
def test_malformed_values_name_the_variable(name: str, value: str, attribute: str) -> None:
    with pytest.raises(config.ConfigError, match=name) as refused:
        getattr(config.Settings({name: value}), attribute)
    assert refused.value.variable == name
    assert isinstance(refused.value, ProductError)


def test_defaults_and_parsing() -> None:
    settings = config.Settings({"OPERATOR_USER_IDS": " U1, U2 ,,", "SLACK_API_BASE_URL": "http://127.0.0.1:9/api"})
    assert settings.operator_user_ids == frozenset({"U1", "U2"})
    assert settings.slack_api_base_url == "http://127.0.0.1:9/api/"
    assert settings.tasks_dispatch_deadline_seconds == 900
    assert settings.tasks_service_account == ""
    assert settings.google_cloud_project is None


def test_every_variable_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `([A-Z_]+)` \|", readme, re.MULTILINE)}
    declared = {v.name for v in config.VARIABLES}
    assert declared <= table, f"undocumented: {sorted(declared - table)}"
    assert table <= declared, f"documented but not declared: {sorted(table - declared)}"


def test_the_readme_gives_each_variables_default_and_readers() -> None:
    """The table's default and "used by" columns say what shared/config.py declares (a tool, not a function, for a
    variable no entry point reads)."""
    readme = (ROOT / "README.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^\| `([A-Z_]+)` \| (.*?) \| (.*?) \|", readme,
                                                                     re.MULTILINE)}  # fmt: skip
    for var in config.VARIABLES:
        default, used_by = rows[var.name]
        if var.default is None:
            assert default == "required", var.name
        elif len(var.default) <= 80:
            assert default == (f"`{var.default}`" if var.default else "empty"), var.name
        readers = ", ".join(entry for entry in config.ENTRY_POINTS if entry in var.used_by)
        if readers:
            assert used_by == readers, var.name
        else:
            assert used_by.startswith("`make "), var.name


def test_every_entry_point_requires_its_slack_and_tasks_settings() -> None:
    names = {v.name for v in config.required_for(config.SLACK_EVENTS)}
    assert {"SLACK_SIGNING_SECRET", "TASKS_QUEUE", "TASKS_TARGET_URL"} <= names


def test_importing_the_product_needs_no_environment_and_builds_no_client() -> None:
    """In a clean interpreter with an empty environment: import everything, touch nothing."""
    code = (
        "import sys, os\n"
        "import functions.main, shared.handlers.slack_events, shared.handlers.slack_interactivity\n"
        "assert 'google.genai' not in sys.modules, 'the ingress path imported google-genai'\n"
        "assert 'mcp' not in sys.modules and 'mcp_types' not in sys.modules, 'the ingress path imported mcp'\n"
        "import shared.handlers.agent_session, shared.handlers.sweep, shared.agent.runner\n"
        "from shared import deps\n"
        "assert deps.get().built() == [], deps.get().built()\n"
        "assert shared.config._settings is None\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_log_lines_are_json_with_severity_and_session_id() -> None:
    record = logging.LogRecord("shared.x", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    record.event_id = "Ev1"
    with session_context("ev-Ev1"):
        line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["severity"] == "WARNING"
    assert entry["message"] == "hello world"
    assert entry["session_id"] == "ev-Ev1"
    assert entry["event_id"] == "Ev1"
    assert "\n" not in line


def test_every_variable_is_declared_once_with_its_parser() -> None:
    names = [v.name for v in config.VARIABLES]
    assert len(names) == len(set(names))
    # Every public attribute of Settings is a declaration (besides raw), named after its variable, and VARIABLES
    # lists exactly those, in declaration order: nothing reads the environment a second way.
    public = {name: value for name, value in vars(config.Settings).items() if not name.startswith("_")}
    declared = {name: value for name, value in public.items() if isinstance(value, config.Var)}
    assert set(public) - set(declared) == {"raw"}
    assert tuple(declared.values()) == config.VARIABLES
    assert all(attribute == var.name.lower() for attribute, var in declared.items())
    others = [n for n, v in vars(config.Settings).items() if isinstance(v, property | functools.cached_property)]
    assert others == []
    for var in config.VARIABLES:
        assert var.help
        assert var.used_by <= set(config.ENTRY_POINTS)
        assert var.default is None or isinstance(var.default, str)
        assert isinstance(var.secret, bool)
        assert isinstance(var.read_by_library, bool)
        assert getattr(config.Settings, var.name.lower()) is var


def test_a_declaration_under_another_name_is_refused() -> None:
    with pytest.raises((TypeError, RuntimeError)) as refused:  # Python 3.11 wraps __set_name__'s error

        class Wrong(config.Settings):
            max_turns = config.Var("SESSION_MAX_TURNS", "20", "turns", frozenset(), config.integer(1, 200))

    assert "declares SESSION_MAX_TURNS; name it session_max_turns" in str(refused.value.__cause__ or refused.value)


def test_every_default_parses_to_its_declared_type() -> None:
    settings = config.Settings({})
    for var in config.VARIABLES:
        if var.default is None:
            continue
        getattr(settings, var.name.lower())  # a default that does not parse raises here
    assert isinstance(settings.session_max_turns, int)
    assert isinstance(settings.require_oidc, bool)
    assert settings.operator_user_ids == frozenset()
    assert settings.tool_tiers == {}
    assert settings.token_prices["prompt"] == 0.30
    assert settings.assistant_prompts[0] == ("What can you do?", "What can you do, and which tools can you use?")
    assert config.Settings({"ASSISTANT_PROMPTS": "[]"}).assistant_prompts == ()


def test_values_are_read_once_and_cached() -> None:
    environ = {"SESSION_MAX_TURNS": "7"}
    settings = config.Settings(environ)
    assert settings.session_max_turns == 7
    environ["SESSION_MAX_TURNS"] = "8"
    assert settings.session_max_turns == 7
    assert config.Settings(environ).session_max_turns == 8


def test_the_session_wall_time_stays_below_the_dispatch_deadline() -> None:
    assert config.Settings({"SESSION_WALL_SECONDS": "899"}).session_wall_seconds == 899
    with pytest.raises(config.ConfigError, match=r"SESSION_WALL_SECONDS \(900\) must stay below") as refused:
        _ = config.Settings({"SESSION_WALL_SECONDS": "900"}).session_wall_seconds
    assert refused.value.variable == "SESSION_WALL_SECONDS"
    raised = {"SESSION_WALL_SECONDS": "1200", "TASKS_DISPATCH_DEADLINE_SECONDS": "1800"}
    assert config.Settings(raised).session_wall_seconds == 1200
    with pytest.raises(config.ConfigError, match="TASKS_DISPATCH_DEADLINE_SECONDS") as refused:
        _ = config.Settings({"TASKS_DISPATCH_DEADLINE_SECONDS": "later"}).session_wall_seconds
    assert refused.value.variable == "TASKS_DISPATCH_DEADLINE_SECONDS"


SECRETS = [v for v in config.VARIABLES if v.secret]


def test_the_secrets_are_the_ones_terraform_keeps_in_secret_manager() -> None:
    """The secret ids the refusal names are the ones terraform/main.tf's local.secrets creates."""
    main = (ROOT / "terraform" / "main.tf").read_text()
    secrets = main[main.index("secrets = merge(") :]
    ids = dict(re.findall(r'\b([A-Z_]+)\s*=\s*"\$\{var\.name_prefix\}-([a-z-]+)"', secrets[: secrets.index("\n  )")]))
    assert ids == {var.name: var.secret_suffix for var in SECRETS}


@pytest.mark.parametrize("name", [v.name for v in SECRETS])
@pytest.mark.parametrize("written", ["terraform", "bare", "padded"])
def test_a_secret_still_holding_terraforms_placeholder_is_refused(name: str, written: str) -> None:
    var = config.BY_NAME[name]
    placeholder = {
        "terraform": f"unset: add the real value with gcloud secrets versions add app-{var.secret_suffix}",
        "bare": "unset:",
        "padded": " unset: add the real value later\n",
    }[written]
    secret = f"app-{var.secret_suffix}" if written == "terraform" else f"<name_prefix>-{var.secret_suffix}"
    settings = config.Settings({name: placeholder})
    for read in (lambda: settings.raw(name), lambda: getattr(settings, name.lower())):
        with pytest.raises(config.PlaceholderSecret) as refused:
            read()
        message = str(refused.value)
        assert refused.value.variable == name
        assert message.startswith(f"{name} ")
        assert f"Secret Manager secret {secret}" in message
        assert f'printf %s "$VALUE" | gcloud secrets versions add {secret} --data-file=-' in message
        assert "make restart" in message
    if written != "terraform":
        assert f'"${{var.name_prefix}}-{var.secret_suffix}"' in message  # as Terraform names it


def test_a_secrets_value_never_appears_in_its_error() -> None:
    with pytest.raises(config.ConfigError, match="SLACK_BOT_TOKEN") as refused:
        _ = config.Settings({"SLACK_BOT_TOKEN": "hunter2-real-secret"}).slack_bot_token
    assert "hunter2" not in str(refused.value)
    # A secret whose parser quotes what it got (as url and integer do) has the value taken out of the message.
    api_key = config.Var("GEMINI_API_KEY", "", "key", frozenset(), config_values.url, secret=True)
    with pytest.raises(config.ConfigError, match="GEMINI_API_KEY must be an http") as refused:
        api_key.read(config.Settings({"GEMINI_API_KEY": "hunter2-real-secret"}))
    assert "hunter2" not in str(refused.value)
    assert refused.value.variable == "GEMINI_API_KEY"


def test_secrets_for_lists_each_entry_points_secrets() -> None:
    names = {entry: {v.name for v in config.secrets_for(entry)} for entry in config.ENTRY_POINTS}
    assert names[config.SLACK_EVENTS] == {"SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"}
    assert names[config.SLACK_INTERACTIVITY] == {"SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"}
    assert names[config.AGENT_SESSION] == {"SLACK_BOT_TOKEN", "GEMINI_API_KEY"}
    assert names[config.SWEEP] == {"SLACK_BOT_TOKEN"}


# --- the entry points, through functions-framework's test client, with nothing behind them ---------------------

GOOD = {
    "SLACK_SIGNING_SECRET": "a-real-signing-secret",
    "SLACK_BOT_TOKEN": "xoxb-test",
    "TASKS_QUEUE": "projects/p/locations/l/queues/q",
    "TASKS_TARGET_URL": "http://127.0.0.1:9/",
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9",  # nothing listens: storage must not be reached
    "REQUIRE_OIDC": "false",
}


class Untouchable:
    """A Firestore, Slack or Cloud Tasks client that records any use (and fails it)."""

    def __init__(self, touched: list[str], what: str) -> None:
        self._touched = touched
        self._what = what

    def __getattr__(self, name: str) -> Any:
        self._touched.append(f"{self._what}.{name}")
        raise AssertionError(f"{self._what}.{name} was used")


@pytest.fixture
def untouched(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """No client may be used; logs go to caplog (JSON logging is already set up, as after an instance's first
    request)."""
    for name in ("GEMINI_API_KEY", "LOG_LEVEL", *GOOD):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(logs, "_configured", True)
    caplog.set_level(logging.INFO)
    touched: list[str] = []
    clients = {what: Untouchable(touched, what) for what in ("firestore", "slack", "tasks", "model")}
    config.reset()
    try:
        with deps.override(**clients):
            yield touched
    finally:
        config.reset()


def refusals(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The refusal lines, as the JSON Cloud Logging receives."""
    return [
        json.loads(JsonFormatter().format(record))
        for record in caplog.records
        if record.name == "functions.main" and record.levelno >= logging.ERROR
    ]


def mention_body() -> bytes:
    from infra.slack_payloads import event_callback, mention

    return json.dumps(event_callback(mention(channel="CPLACE", ts="1700000000.000100"), event_id="EvPLACE")).encode()


def test_a_correctly_signed_request_is_refused_while_the_signing_secret_is_the_placeholder(
    monkeypatch: pytest.MonkeyPatch, untouched: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Defect: the signing secret accepted requests signed with Terraform's public placeholder text."""
    from infra.signing import signed_headers

    placeholder = "unset: add the real value with gcloud secrets versions add app-slack-signing-secret"
    for name, value in {**GOOD, "SLACK_SIGNING_SECRET": placeholder}.items():
        monkeypatch.setenv(name, value)
    config.reset()
    client = app_for("slack_events")
    for body in (mention_body(), json.dumps({"type": "url_verification", "challenge": "c"}).encode()):
        caplog.clear()
        reply = client.post("/", data=body, headers=signed_headers(placeholder, body))
        assert reply.status_code == 500
        assert reply.get_json() == {"error": "server misconfigured: SLACK_SIGNING_SECRET is not set up"}
        [line] = refusals(caplog)  # one line per request
        assert line["severity"] == "ERROR"
        assert line["variable"] == "SLACK_SIGNING_SECRET"
        assert "gcloud secrets versions add app-slack-signing-secret --data-file=-" in line["fix"]
        assert "make restart" in line["fix"]
        assert placeholder not in json.dumps(line)
    assert untouched == []  # nothing read, stored or enqueued


@pytest.mark.parametrize(
    ("entry_point", "name"),
    [
        (config.SLACK_EVENTS, "SLACK_SIGNING_SECRET"),
        (config.SLACK_EVENTS, "SLACK_BOT_TOKEN"),
        (config.SLACK_INTERACTIVITY, "SLACK_SIGNING_SECRET"),
        (config.SLACK_INTERACTIVITY, "SLACK_BOT_TOKEN"),
        (config.AGENT_SESSION, "SLACK_BOT_TOKEN"),
        (config.AGENT_SESSION, "GEMINI_API_KEY"),  # read by google-genai, but the placeholder is no key either
        (config.SWEEP, "SLACK_BOT_TOKEN"),
    ],
)
def test_every_entry_point_refuses_everything_while_one_of_its_secrets_is_the_placeholder(
    monkeypatch: pytest.MonkeyPatch, untouched: list[str], caplog: pytest.LogCaptureFixture, entry_point: str, name: str
) -> None:
    for variable, value in {
        **GOOD,
        name: f"unset: add the real value with gcloud secrets versions add x-{name}",
    }.items():
        monkeypatch.setenv(variable, value)
    config.reset()
    client = app_for(entry_point)
    for reply in (client.post("/", json={"session_id": "ev-x"}), client.get("/")):
        assert (reply.status_code, reply.get_json()) == (500, {"error": f"server misconfigured: {name} is not set up"})
    assert [line["variable"] for line in refusals(caplog)] == [name, name]
    assert untouched == []


def test_a_malformed_bot_token_is_refused_without_its_value(
    monkeypatch: pytest.MonkeyPatch, untouched: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in {**GOOD, "SLACK_BOT_TOKEN": "hunter2-not-a-token"}.items():
        monkeypatch.setenv(name, value)
    config.reset()
    reply = app_for("sweep").post("/", json={})
    assert (reply.status_code, reply.get_json()) == (
        500,
        {"error": "server misconfigured: SLACK_BOT_TOKEN is not set up"},
    )
    [line] = refusals(caplog)
    assert "xox" in line["fix"]
    assert "hunter2" not in json.dumps(line) + reply.get_data(as_text=True)
    assert untouched == []


def test_an_unset_signing_secret_is_named_at_its_first_use(
    monkeypatch: pytest.MonkeyPatch, untouched: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Unset (not the placeholder): the handshake needs no bot token, and the first read names what is missing."""
    from infra.signing import signed_headers

    for name, value in GOOD.items():
        if name not in {"SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"}:
            monkeypatch.setenv(name, value)
    config.reset()
    body = json.dumps({"type": "url_verification", "challenge": "c"}).encode()
    reply = app_for("slack_events").post("/", data=body, headers=signed_headers("anything", body))
    assert (reply.status_code, reply.get_json()) == (
        500,
        {"error": "server misconfigured: SLACK_SIGNING_SECRET is not set up"},
    )
    [line] = refusals(caplog)
    assert "SLACK_SIGNING_SECRET is not set" in line["fix"]
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "a-real-signing-secret")
    config.reset()
    reply = app_for("slack_events").post("/", data=body, headers=signed_headers("a-real-signing-secret", body))
    assert (reply.status_code, reply.get_json()) == (200, {"challenge": "c"})
    assert untouched == []


def test_a_malformed_log_level_is_refused_too(monkeypatch: pytest.MonkeyPatch, untouched: list[str]) -> None:
    for name, value in {**GOOD, "LOG_LEVEL": "LOUD"}.items():
        monkeypatch.setenv(name, value)
    config.reset()
    reply = app_for("slack_interactivity").post("/", data=b"payload=%7B%7D")
    assert (reply.status_code, reply.get_json()) == (500, {"error": "server misconfigured: LOG_LEVEL is not set up"})
    assert untouched == []


def test_parallel_first_requests_build_one_client_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: two requests of a fresh instance (parallel task deliveries) each built the model client; the second
    replaced the first while its request still used it, whose connection was then closed under it ("Bad file
    descriptor", and the session failed as "model unavailable")."""
    import threading
    import time

    from google import genai

    from shared.agent import model

    built: list[object] = []

    class SlowClient:
        def __init__(self, **_: Any) -> None:
            time.sleep(0.05)  # a real client takes a while to build: long enough for the others to arrive
            built.append(self)

    monkeypatch.setattr(genai, "Client", SlowClient)
    got: list[object] = []
    start = threading.Barrier(4)

    def first_request() -> None:
        start.wait()
        got.append(model.client())

    with deps.override(model=None):
        threads = [threading.Thread(target=first_request) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(built) == 1
    assert got == built * 4

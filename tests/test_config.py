"""Configuration: lazy, validated, documented; importing the product has no side effects."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared import config
from shared.logs import JsonFormatter, session_context

ROOT = Path(__file__).resolve().parent.parent


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
    ],
)
def test_malformed_values_name_the_variable(name: str, value: str, attribute: str) -> None:
    with pytest.raises(config.ConfigError, match=name):
        getattr(config.Settings({name: value}), attribute)


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


def test_every_entry_point_requires_its_slack_and_tasks_settings() -> None:
    names = {v.name for v in config.required_for(config.SLACK_EVENTS)}
    assert {"SLACK_SIGNING_SECRET", "TASKS_QUEUE", "TASKS_TARGET_URL"} <= names


def test_importing_the_product_needs_no_environment_and_builds_no_client() -> None:
    """In a clean interpreter with an empty environment: import everything, touch nothing."""
    code = (
        "import sys, os\n"
        "import functions.main, shared.ingress, shared.worker, shared.store, shared.tasks, shared.config\n"
        "from shared import store, tasks\n"
        "assert store._client is None and tasks._client is None\n"
        "assert shared.config._settings is None\n"
        "assert 'google.genai' not in sys.modules, 'the ingress path imported google-genai'\n"
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

"""The ``mcp_servers`` Terraform variable: MCP_SERVERS as shared/config.py reads it, and each credential a secret
of its own that only agent_session reads (evaluated offline, like tests/deploy/test_terraform.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.evaluate import Evaluator, Unknown
from deploy.evaluate import evaluator as evaluator_for
from deploy.terraform import Module
from shared import config
from tests.deploy.conftest import TFVARS
from tests.deploy.test_terraform import deployed, planned

SERVERS: dict[str, Any] = {
    "tickets": {"url": "https://mcp.example.com/mcp", "secret": True, "exclude": ["delete_project"]},
    "wiki-search": {"url": "https://wiki.example.com/mcp", "include": ["search"], "timeout_seconds": 10},
}
CREDENTIAL = "MCP_CREDENTIAL_TICKETS"


@pytest.fixture(scope="module")
def with_servers(module: Module) -> Evaluator:
    return evaluator_for(module, {**TFVARS, "mcp_servers": SERVERS})


def test_no_servers_by_default_as_in_the_code(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    assert functions[config.AGENT_SESSION].environment["MCP_SERVERS"] == config.Settings.mcp_servers.default == "[]"
    assert not any(name.startswith("MCP_CREDENTIAL_") for f in functions.values() for name in f.secrets)


def test_the_servers_reach_agent_session_as_the_code_reads_them(module: Module, with_servers: Evaluator) -> None:
    assert with_servers.failed_validations() == []
    functions = deployed(module, with_servers)
    value = functions[config.AGENT_SESSION].environment["MCP_SERVERS"]
    servers = {s.name: s for s in config.Settings({"MCP_SERVERS": value}).mcp_servers}
    assert set(servers) == {"tickets", "wiki-search"}
    assert servers["tickets"].credential_env == CREDENTIAL
    assert servers["tickets"].exclude == frozenset({"delete_project"})
    assert servers["tickets"].include is None
    assert servers["wiki-search"].credential_env is None
    assert servers["wiki-search"].include == frozenset({"search"})
    assert servers["wiki-search"].timeout_seconds == 10
    readers = {key for key, function in functions.items() if "MCP_SERVERS" in function.environment}
    assert readers == set(config.Settings.mcp_servers.used_by)


def test_only_agent_session_gets_the_configured_servers_secrets(module: Module, with_servers: Evaluator) -> None:
    functions = deployed(module, with_servers)
    holders = {key for key, function in functions.items() if CREDENTIAL in function.secrets}
    assert holders == {config.AGENT_SESSION}
    source = functions[config.AGENT_SESSION].secrets[CREDENTIAL]
    assert source == Unknown(f'google_secret_manager_secret.this["{CREDENTIAL}"].secret_id')
    mcp_secrets = [n for f in functions.values() for n in f.secrets if n.startswith("MCP_CREDENTIAL_")]
    assert sorted(set(mcp_secrets)) == [CREDENTIAL]  # wiki-search has no credential
    secrets = planned(module, with_servers, "google_secret_manager_secret", "this")
    assert secrets[CREDENTIAL]["secret_id"] == "opagent-mcp-tickets"
    placeholder = planned(module, with_servers, "google_secret_manager_secret_version", "placeholder")[CREDENTIAL]
    assert str(placeholder["secret_data"]).startswith("unset:")
    access = planned(module, with_servers, "google_secret_manager_secret_iam_member", "access")
    assert [key for key in access if key.endswith(f"/{CREDENTIAL}")] == [f"{config.AGENT_SESSION}/{CREDENTIAL}"]


@pytest.mark.parametrize(
    "servers",
    [
        {"Tickets!": {"url": "https://mcp.example.com/mcp"}},
        {"tickets": {"url": "http://mcp.example.com/mcp"}},
        {"tickets": {"url": "https://mcp.example.com/mcp", "timeout_seconds": 0}},
    ],
    ids=["bad name", "not https", "no timeout"],
)
def test_a_bad_server_is_refused(module: Module, servers: dict[str, Any]) -> None:
    failed = evaluator_for(module, {**TFVARS, "mcp_servers": servers}).failed_validations()
    assert any("mcp_servers" in message for message in failed), json.dumps(servers)


@pytest.mark.parametrize("name", ["MCP_SERVERS", CREDENTIAL])
def test_extra_environment_cannot_set_the_servers_or_a_credential(module: Module, name: str) -> None:
    assert evaluator_for(module, {**TFVARS, "extra_environment": {name: "x"}}).failed_validations()

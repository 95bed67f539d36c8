"""A setting the code reads on a function's path reaches that function as Terraform deploys it.

Each test runs the code that reads a setting under the environment Terraform gives the function that runs it,
tuned away from the default, so a setting whose declared readers (``used_by``) miss a function that really reads
it, and which Terraform therefore leaves at its default there, is caught.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.evaluate import evaluator as evaluator_for
from deploy.terraform import Module
from shared import config
from shared.asks import routing
from shared.state import events
from shared.state.firestore import EVENT_EXPIRES_FIELD
from tests.deploy.conftest import TFVARS
from tests.deploy.test_terraform import deployed


@pytest.fixture
def as_deployed(module: Module) -> Iterator[Any]:
    """Use, as ``config.settings()``, the plain environment Terraform gives ``function`` with ``tfvars``."""

    def use(function: str, tfvars: dict[str, Any]) -> None:
        tuned = evaluator_for(module, {**TFVARS, **tfvars})
        assert tuned.failed_validations() == []
        environment = deployed(module, tuned)[function].environment
        config._settings = config.Settings({k: v for k, v in environment.items() if isinstance(v, str)})

    yield use
    config.reset()


def test_agent_session_lets_the_requester_answer_in_a_dm_when_allowed(as_deployed: Any) -> None:
    """ask_operator and an MCP server's request for input run in agent_session: with allow_requester_answers and
    no operator channel, a question in a DM is asked there (README, "Where operators are asked"), not refused."""
    as_deployed(config.AGENT_SESSION, {"allow_requester_answers": True})
    assert not routing.nobody_can_answer("D0DIRECT")
    assert routing.nobody_can_answer("D0DIRECT", operators_only=True)


@pytest.mark.parametrize("function", [config.AGENT_SESSION, config.SWEEP])
def test_the_de_duplication_records_of_alerts_and_reminders_live_as_configured(as_deployed: Any, function: str) -> None:
    """agent_session (alerts, notices) and the sweep (reminders) write de-duplication records too (notices):
    their TTL is the configured EVENT_TTL_HOURS, as the ingress's are."""
    as_deployed(function, {"event_ttl_hours": 24})
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert events.record("reminder", "", at)[EVENT_EXPIRES_FIELD] == at + timedelta(hours=24)

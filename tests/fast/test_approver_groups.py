"""A user group that cannot be read admits nobody through it, whether Slack refuses to say or cannot be reached, and
what could not be read is not kept: the next press asks again."""

from __future__ import annotations

from typing import Any
from urllib.error import URLError

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from shared.asks import approvers
from shared.slack import client as slack


class Groups:
    """``usergroups.users.list`` as Slack answers it: ``failures`` first (raised in turn), then ``members``."""

    def __init__(self, failures: list[Exception], members: list[str]) -> None:
        self.failures, self.members, self.asked = failures, members, 0

    def usergroups_users_list(self, *, usergroup: str) -> dict[str, Any]:
        self.asked += 1
        if self.failures:
            raise self.failures.pop(0)
        return {"ok": True, "users": self.members}


def _refused() -> SlackApiError:
    response = SlackResponse(client=None, http_verb="POST", api_url="https://slack.com/api/usergroups.users.list",
                             req_args={}, data={"ok": False, "error": "no_such_subteam"}, headers={},
                             status_code=200)  # fmt: skip
    return SlackApiError("refused", response)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("failure", [_refused(), URLError("slack.com unreachable"), TimeoutError("read timed out")],
                         ids=["refused", "unreachable", "timed out"])  # fmt: skip
def test_a_group_that_cannot_be_read_admits_nobody_and_is_asked_again(
    monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    groups = Groups([failure], ["U0MEMBER"])
    monkeypatch.setattr(slack, "client", lambda: groups)
    approvers.forget_groups()
    try:
        assert approvers.group_members("S0PINS") == frozenset()
        assert approvers.group_members("S0PINS") == frozenset({"U0MEMBER"})
        assert approvers.group_members("S0PINS") == frozenset({"U0MEMBER"})  # kept once read
        assert groups.asked == 2
    finally:
        approvers.forget_groups()

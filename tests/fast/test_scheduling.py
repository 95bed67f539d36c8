"""How `make test` shares the suite between its pytest-xdist workers (tests/scheduling.py): whole units, the
heaviest first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from tests import scheduling
from tests.scheduling import UnitScheduling, unit_of


class Worker:
    """What the scheduler sends a worker: the indexes (into the worker's collection) of the tests to run."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def test_a_unit_is_a_module_or_the_whole_browser_tier() -> None:
    assert unit_of("tests/stack/test_agent.py::test_x[a-b]") == "tests/stack/test_agent.py"
    assert unit_of("tests/fast/test_mrkdwn.py::TestX::test_y") == "tests/fast/test_mrkdwn.py"
    assert unit_of("tests/browser/test_workspace.py::test_a") == "tests/browser"
    assert unit_of("tests/browser/test_workspace_agent.py::test_b") == "tests/browser"


def test_the_heaviest_unit_goes_first_and_a_unit_goes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduling, "WEIGHTS", {"tests/stack/test_dev.py": 300.0})
    collection = [
        "tests/fast/test_mrkdwn.py::test_1",
        "tests/fast/test_mrkdwn.py::test_2",
        "tests/fast/test_mrkdwn.py::test_3",
        "tests/stack/test_agent.py::test_1",
        "tests/stack/test_agent.py::test_2",
        "tests/browser/test_workspace.py::test_1",
        "tests/stack/test_dev.py::test_1",
        "tests/browser/test_workspace_agent.py::test_1",
    ]
    scheduler: Any = UnitScheduling.__new__(UnitScheduling)  # its state only: no xdist session behind it
    worker = Worker()
    scheduler.workqueue = OrderedDict()
    for nodeid in collection:
        scheduler.workqueue.setdefault(scheduler._split_scope(nodeid), {})[nodeid] = False
    scheduler.assigned_work = {}
    scheduler.registered_collections = {worker: collection}
    order = []
    while scheduler.workqueue:
        scheduler._assign_work_unit(worker)
        order.append(sorted(collection[i] for i in worker.sent[-1]))
    # test_dev by its measured weight; the browser tier's 2 tests (5 s each) before test_agent's 2 (2 s each);
    # the fast tier's 3 quick ones last.
    assert order == [
        ["tests/stack/test_dev.py::test_1"],
        ["tests/browser/test_workspace.py::test_1", "tests/browser/test_workspace_agent.py::test_1"],
        ["tests/stack/test_agent.py::test_1", "tests/stack/test_agent.py::test_2"],
        ["tests/fast/test_mrkdwn.py::test_1", "tests/fast/test_mrkdwn.py::test_2", "tests/fast/test_mrkdwn.py::test_3"],
    ]

"""How `make test` shares the suite between pytest-xdist workers (``-n 2 --dist loadscope``).

Each worker runs whole units: a test module, or the whole browser tier (its stack and Chromium are the tier's), so
a module's fixtures (an agent_session restarted with other settings, a server of its own) start once, in one
worker. Each worker has a stack of its own (``tests/conftest.py``): nothing is shared between workers but the
machine. A worker asks for its next unit when it is nearly done with the one it has; the next unit is the one
expected to take longest (``WEIGHTS``, seconds a unit took in a measured run), so the long units start first and
the short ones fill in at the end instead of one long module finishing alone. A unit not listed weighs its number of
tests times its tier's seconds per test; the weights only order the work, they never decide whether a test runs.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

BROWSER = "tests/browser"

# Seconds the slowest units' slowest tests took in a measured run (the top 80 of `pytest --durations=80` summed per
# unit, on a busy machine), rounded: the units that start stacks of their own, a fresh venv, or SIGKILL workers.
WEIGHTS: dict[str, float] = {
    "tests/stack/test_dev.py": 320,
    "tests/stack/test_crashes.py": 210,
    "tests/stack/test_faults.py": 200,
    "tests/stack/test_edit_races.py": 175,
    "tests/stack/test_mcp_elicit.py": 110,
    "tests/stack/test_approvals.py": 100,
    "tests/deploy/test_package.py": 100,
    "tests/stack/test_routing.py": 75,
    "tests/stack/test_agent.py": 70,
    "tests/stack/test_heartbeat.py": 60,
    "tests/stack/test_dm_conversation.py": 60,
    "tests/stack/test_mcp.py": 55,
}
# Any other unit: its number of tests times its tier's typical seconds per test.
PER_TEST = {"tests/stack": 2.0, "tests/browser": 5.0, "tests/deploy": 0.3}
PER_FAST_TEST = 0.1


def unit_of(nodeid: str) -> str:
    """The unit a test runs in: its module, or the browser tier (one stack and one Chromium for all of it)."""
    path = nodeid.split("::", 1)[0]
    return BROWSER if path.startswith(BROWSER + "/") else path


class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """``--dist loadscope`` with this suite's units, the heaviest first."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _weight(self, unit: str) -> float:
        if unit in WEIGHTS:
            return WEIGHTS[unit]
        tier = next((rate for folder, rate in PER_TEST.items() if unit.startswith(folder)), PER_FAST_TEST)
        return tier * len(self.workqueue[unit])

    def _assign_work_unit(self, node: WorkerController) -> None:
        heaviest = max(self.workqueue, key=self._weight)
        self.workqueue.move_to_end(heaviest, last=False)
        super()._assign_work_unit(node)

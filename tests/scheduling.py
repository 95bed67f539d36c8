"""How `make test` shares the suite between pytest-xdist workers (``-n 2 --dist loadscope``).

Each worker runs whole units: a test module, or the whole browser tier (its stack and Chromium are the tier's), so
a module's fixtures (an agent_session restarted with other settings, a server of its own) start once, in one
worker. Each worker has a stack of its own (``tests/conftest.py``): nothing is shared between workers but the
machine. A worker asks for its next unit when it is nearly done with the one it has; the next unit is the one
expected to take longest (``WEIGHTS``, seconds a unit took in a measured run), so the long units start first and
the short ones fill in at the end instead of one long module finishing alone. A unit not listed weighs by its number
of tests; the weights only order the work, they never decide whether a test runs.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

BROWSER = "tests/browser"

# Seconds each of the slowest units took alone in a measured run (`pytest --durations`, summed per unit), rounded.
WEIGHTS: dict[str, float] = {}


def unit_of(nodeid: str) -> str:
    """The unit a test runs in: its module, or the browser tier (one stack and one Chromium for all of it)."""
    path = nodeid.split("::", 1)[0]
    return BROWSER if path.startswith(BROWSER + "/") else path


class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """``--dist loadscope`` with this suite's units, the heaviest first."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _weight(self, unit: str) -> float:
        return WEIGHTS.get(unit, float(len(self.workqueue[unit])))

    def _assign_work_unit(self, node: WorkerController) -> None:
        heaviest = max(self.workqueue, key=self._weight)
        self.workqueue.move_to_end(heaviest, last=False)
        super()._assign_work_unit(node)

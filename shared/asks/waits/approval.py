"""An approval whose asker ended: expired (the sweep's bound) or denied (a stop), never run, its card saying why
(the ask lifecycle's cancel step, ``shared.asks.lifecycle``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.asks import lifecycle
from shared.asks.waits.base import Ending
from shared.state import approvals as stored_approvals
from shared.state.models import Waiting, WaitKind


@dataclass(frozen=True)
class ApprovalEnd:
    kind: WaitKind = WaitKind.APPROVAL

    def end(self, entry: Waiting, ending: Ending) -> list[str]:
        approval = stored_approvals.get_approval(entry.key)
        if approval is not None and lifecycle.cancel(approval, why=ending.why, by=ending.by, expired=ending.expired):
            return [entry.key]
        return []


WAIT = ApprovalEnd()

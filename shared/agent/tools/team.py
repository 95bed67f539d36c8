"""Your team's own tools. Add a typed, documented function here with ``@tool`` and the agent can use it.

Every ``@tool`` defined in this module joins each session's toolset (``shared.agent.tools.toolset``). The
docstring is what the model reads to decide when to call it. Use ``shared.agent.tools.base.context()`` inside a
tool for the call it serves (its session, and ``idempotency_key``), and raise ``shared.agent.tools.base.ToolError``
for a refusal the model should hear about. See the README's "Adding your own tool".

``restart_service`` and ``scale_service`` are examples to try things on locally: risky, outward, non-idempotent
actions (so their tier is ``approve``: an operator approves each exact call) that only record what they would do
(in Firestore's ``demo_actions``), after saying so in the thread.
"""

from __future__ import annotations

from typing import Any

from google.cloud.firestore import Increment

from shared.agent.tools.base import ToolError, context
from shared.agent.tools.function import tool
from shared.state.firestore import db, now

ENVIRONMENTS = ("dev", "staging", "production")


def _record(saying: str, *, action: str, **what: Any) -> None:
    """What the non-idempotent examples do: say it in the thread, then record it in ``demo_actions``."""
    ctx = context()
    ctx.post_ts.append(ctx.surface.post(saying, key=ctx.post_key(f":{action}")))
    record = {"action": action, **what, "key": ctx.idempotency_key, "session_id": ctx.caller, "at": now()}
    db().collection("demo_actions").add(record)


@tool(outward=True, summary="Restart {name} in {environment}")  # not idempotent: never re-run blindly after a crash
def restart_service(name: str, environment: str) -> dict[str, Any]:
    """Restart one of the team's services in an environment (an example tool: it records what it would do).

    Use it only when someone asks for a restart, and say afterwards what was restarted.

    Args:
        name: The service, e.g. "api" or "web".
        environment: One of "dev", "staging" or "production".
    """
    if environment not in ENVIRONMENTS:
        raise ToolError(f"environment must be one of {', '.join(ENVIRONMENTS)}")
    _record(f"Restarting `{name}` in `{environment}`…", action="restart", service=name, environment=environment)
    return {"restarted": name, "environment": environment}


@tool(outward=True, summary="Scale {name} to {replicas} replicas")  # not idempotent, tier approve (outward)
def scale_service(name: str, replicas: int) -> dict[str, Any]:
    """Scale one of the team's services to a number of replicas (an example tool: it records what it would do).

    Args:
        name: The service, e.g. "api" or "web".
        replicas: How many replicas, 0 to 50.
    """
    if not 0 <= replicas <= 50:
        raise ToolError("replicas must be between 0 and 50")
    _record(f"Scaling `{name}` to {replicas} replicas…", action="scale", service=name, replicas=replicas)
    return {"scaled": name, "replicas": replicas}


# tier approve (outward); pinning twice with one key is pinning once
@tool(outward=True, idempotent=True, summary="Pin {name} to version {version}")
def pin_version(name: str, version: str) -> dict[str, Any]:
    """Pin one of the team's services to a release version (an example tool: it records what it would do).

    Args:
        name: The service, e.g. "api" or "web".
        version: The release to pin, e.g. "1.4.2".
    """
    ctx = context()
    ctx.post_ts.append(ctx.surface.post(f"Pinning `{name}` to {version}…", key=ctx.post_key(":pin")))
    # Keyed by the call's idempotency key, as a real backend would de-duplicate: a re-run after a crash has one
    # effect (``runs`` counts the calls that reached it).
    db().collection("demo_actions").document(ctx.idempotency_key).set(
        {"action": "pin", "service": name, "version": version, "key": ctx.idempotency_key, "session_id": ctx.caller,
         "at": now(), "runs": Increment(1)},
        merge=True,
    )  # fmt: skip
    return {"pinned": name, "version": version}

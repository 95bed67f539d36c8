"""The ``sweep`` entry point: Cloud Scheduler's OIDC token checked, then one job; its counts are the reply.

Two Cloud Scheduler jobs call it: the daily sweep (body ``{}``) and, every few minutes, the rescue (body
``{"job": "rescue"}``), which queues again sessions left queued or whose worker died. Locally
(REQUIRE_OIDC=false) a ``"now": "<ISO time>"`` in the body may set the clock, so the sweep can be tried
against old questions without waiting a day; deployed, the clock is always the real one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from shared import config
from shared.auth import oidc
from shared.handlers.common import INTERNAL_MAX_BODY_BYTES, Reply, retry_contended, too_large
from shared.limits import loads_untrusted
from shared.usecases import sweep

MAX_BODY_BYTES = INTERNAL_MAX_BODY_BYTES


@retry_contended
def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
    settings = config.settings()
    refused = oidc.check(
        headers, audience=settings.oidc_audience, service_account=settings.scheduler_service_account
    ) or too_large(body, MAX_BODY_BYTES)  # the token first, as agent_session checks it
    if refused:
        return refused
    try:
        payload = loads_untrusted(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        return {"error": f"bad body: {exc}"}, 400
    if not isinstance(payload, dict):
        return {"error": "bad body: not a JSON object"}, 400
    job = payload.get("job", "sweep")
    if job not in ("sweep", "rescue"):  # a tuple: an unhashable job (a list) is simply not one of them
        return {"error": f"bad body: unknown job {job!r}"}, 400
    when = None
    if "now" in payload and not settings.require_oidc:
        try:
            when = datetime.fromisoformat(str(payload["now"]))
        except ValueError as exc:
            return {"error": f"bad body: {exc}"}, 400
        if when.tzinfo is None:
            return {"error": "bad body: now needs a time zone"}, 400
    return (sweep.rescue(when) if job == "rescue" else sweep.run(when)), 200

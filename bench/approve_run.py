"""Figure 15: an operator's decision to the approved call's result in the model's hands: Approve, and Edit.

Two paths are timed side by side on the same stack, taking turns, repetition by repetition:

- approve → run: the operator's Approve on an approval card, signed and form-encoded, through the
  slack_interactivity handler (the press checked against the card, the decision and the resuming session in one
  transaction, its task, the card's update), then the resumption's delivery to agent_session (claim, the
  transcript loaded, the approved call run once through the ledger: the example tool ``scale_service`` posts and
  writes its record), to the resumed session's first model request, which carries the call's result;
- edit → run: the operator's submission of the Edit modal (``view_submission``) with a changed argument, through
  the same handler (checked against the tool's JSON Schema, the edited call's digest, the decision with the edit
  in one transaction, its task, the card showing both calls), then the same delivery, which runs the edited call,
  to the first model request, which carries its result and the edit.

Each path runs in this process through the handlers the functions serve (as section 10's do), against the
emulators, the fake Slack and the Gemini stub; the card is posted before the clock starts (an edit's submission
names the card's call, as the modal Slack opened for the Edit press would). The Cloud Tasks hop is left out as in
section 10. The figures are the p50 and p95 over the repetitions after a warm-up, and the edit's p50 over the
Approve's (an edit adds the schema check and the card's second call; its target is at most 1.5 times the
Approve's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from bench import resume
from bench.cost import Rig
from bench.figures import Section, at_most, info, median, percentile, prose, table
from bench.harness import Bench
from bench.resume import Sample
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from shared.handlers import slack_interactivity
from shared.slack import blocks, edit_modal
from shared.state import approvals, ids
from shared.state.models import Approval, SessionStatus

REPS = 30
WARMUP = 2
EDIT_OVER_APPROVE = 1.5
PATHS = ("approve_to_run", "edit_to_run")


def paused_on_a_card(rig: Rig) -> tuple[str, Approval]:
    session_id = rig.start("scale the api")
    rig.script(FakeGemini.call("scale_service", name="api", replicas=3))
    rig.deliver(session_id)
    rig.expect(session_id, SessionStatus.PAUSED)
    [approval] = approvals.get_approvals(rig.session(session_id).approval_ids)
    assert approval.card_ts, "the approval card was not posted"
    return session_id, approval


def resumption(session_id: str, approval: Approval) -> Callable[[Any], str]:
    def resumed(_reply: Any) -> str:
        return ids.resume_id(session_id, approval.seq)

    return resumed


def approve_to_run(rig: Rig) -> Sample:
    session_id, approval = paused_on_a_card(rig)
    value = blocks.approval_value(approval.approval_id, approval.digest)
    thread = rig.session(session_id).thread_ts
    request = rig.press(approval.channel, approval.card_ts or "", thread, action_id=blocks.APPROVE_ACTION, value=value)
    rig.script(FakeGemini.text("Scaled."))
    return resume.timed(rig, slack_interactivity.handle, request, resumption(session_id, approval))


def submission(approval: Approval, replicas: int, *, user: str = local.OPERATOR_ID) -> tuple[bytes, dict[str, str]]:
    """A signed ``view_submission`` of the Edit modal of ``approval`` with ``replicas`` changed, as Slack sends it."""
    from infra.signing import signed_headers

    values = {"arg:name": {edit_modal.VALUE: {"type": "plain_text_input", "value": "api"}},
              "arg:replicas": {edit_modal.VALUE: {"type": "number_input", "value": str(replicas)}}}  # fmt: skip
    view = {"id": f"V{time.time_ns()}", "callback_id": edit_modal.CALLBACK_ID, "state": {"values": values},
            "private_metadata": f"{approval.approval_id}|{approval.digest}"}  # fmt: skip
    payload = {"type": "view_submission", "user": {"id": user}, "view": view, "trigger_id": f"t{time.time_ns()}"}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    signed = signed_headers(local.SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
    return body, {k.lower(): v for k, v in signed.items()}


def edit_to_run(rig: Rig) -> Sample:
    session_id, approval = paused_on_a_card(rig)
    request = submission(approval, 5)
    rig.script(FakeGemini.text("Scaled to 5."))
    sample = resume.timed(rig, slack_interactivity.handle, request, resumption(session_id, approval))
    edited = approvals.get_approval(approval.approval_id)
    assert edited is not None, approval.approval_id
    assert edited.edited_args == '{"name":"api","replicas":5}', edited
    return sample


MEASURES: dict[str, Callable[[Rig], Sample]] = {"approve_to_run": approve_to_run, "edit_to_run": edit_to_run}


def measure(rig: Rig, reps: int = REPS, warmup: int = WARMUP) -> dict[str, list[Sample]]:
    """Both paths ``reps`` times, taking turns, after ``warmup`` runs of each."""
    for _ in range(warmup):
        for path in PATHS:
            MEASURES[path](rig)
    samples: dict[str, list[Sample]] = {path: [] for path in PATHS}
    for rep in range(reps):
        for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
            samples[path].append(MEASURES[path](rig))
    return samples


def run(bench: Bench) -> Section:
    section = Section("15. From an operator's decision to the approved call's result")
    rig = Rig(bench.stack)
    rig.gemini.reset()
    with rig.installed():
        samples = measure(rig)
    ms = {path: [sample.ms for sample in samples[path]] for path in PATHS}
    rows = []
    for path in PATHS:
        p50, p95 = percentile(ms[path], 50), percentile(ms[path], 95)
        section.add(info(f"{path}_p50", p50, "ms"))
        section.add(info(f"{path}_p95", p95, "ms"))
        handler_ms = median([sample.handler_ms for sample in samples[path]])
        rows.append((path.replace("_to_", " → "), len(ms[path]), p50, p95, handler_ms, samples[path][-1].ops.rpcs))
    ratio = percentile(ms["edit_to_run"], 50) / percentile(ms["approve_to_run"], 50)
    section.add(at_most("edit_to_run_over_approve_to_run_p50", ratio, "ratio", EDIT_OVER_APPROVE))
    header = ["path", "repetitions", "p50 ms", "p95 ms", "handler ms (median)", "Firestore RPCs before the model"]
    section.say(*prose(__doc__), table(header, rows))
    return section

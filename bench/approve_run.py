"""Figure 15: an operator's decision to the approved call's result in the model's hands: Approve, and Edit.

How it is measured and read: ``bench/sections/approve_run.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import time

from bench import paths, resume
from bench.figures import Section, missed, paired_ratio, percentile, table, text
from bench.harness import Bench
from bench.paths import Sample
from bench.rig import Rig
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from shared.asks import edits
from shared.handlers import slack_interactivity
from shared.slack import edit_modal
from shared.state import approvals, ids
from shared.state.models import Approval

REPS = 20
WARMUP = 2
EDIT_OVER_APPROVE = 1.5
PATHS = ("approve_to_run", "edit_to_run")


def submission(approval: Approval, replicas: int, *, user: str = local.OPERATOR_ID) -> tuple[bytes, dict[str, str]]:
    """A signed ``view_submission`` of the Edit modal of ``approval`` with ``replicas`` changed, as Slack sends it."""
    values = {"arg:name": {edit_modal.VALUE: {"type": "plain_text_input", "value": "api"}},
              "arg:replicas": {edit_modal.VALUE: {"type": "number_input", "value": str(replicas)}}}  # fmt: skip
    view = {"id": f"V{time.time_ns()}", "callback_id": edit_modal.CALLBACK_ID, "state": {"values": values},
            "private_metadata": edits.ticket(approval, user)}  # fmt: skip
    return Rig.form({"type": "view_submission", "user": {"id": user}, "view": view, "trigger_id": f"t{time.time_ns()}"})


approve_to_run = resume.approve_click  # the Approve's path is section 10's approve click


def edit_to_run(rig: Rig) -> Sample:
    session_id, approval = resume.paused_on_a_card(rig)
    rig.script(FakeGemini.text("Scaled to 5."))
    resumed = ids.resume_id(session_id, approval.seq)
    sample = paths.timed(rig, slack_interactivity.handle, submission(approval, 5), lambda _reply: resumed)
    edited = approvals.get_approval(approval.approval_id)
    assert edited is not None, approval.approval_id
    assert edited.edited_args == '{"name":"api","replicas":5}', edited
    return sample


def measure(rig: Rig, reps: int = REPS, warmup: int = WARMUP) -> dict[str, list[Sample]]:
    """Both paths ``reps`` times, taking turns, after ``warmup`` runs of each."""
    return paths.take_turns(rig, {"approve_to_run": approve_to_run, "edit_to_run": edit_to_run}, reps, warmup)


def run(bench: Bench) -> Section:
    section = Section("15. From an operator's decision to the approved call's result")
    samples = paths.on_stack(bench, measure)
    rows = paths.report(section, samples, lambda path, q: f"{path}_p{q}")
    ms = paths.ms_of(samples)
    section.add(*paired_ratio("edit_to_run_over_approve_to_run_p50", ms["edit_to_run"], ms["approve_to_run"], 50,
                              EDIT_OVER_APPROVE).figures())  # fmt: skip
    rows = [(path.replace("_to_", " → "), *rest) for path, *rest in rows]
    section.glance = [f for f in section.figures if "_ci95_" not in f.name]
    section.say(*text("approve_run"), table(paths.HEADER, rows))
    if missed(section.figures):
        p50 = {path: percentile(ms[path], 50) for path in PATHS}
        section.say(
            f"{missed(section.figures)} The edit's p50 was {p50['edit_to_run']:.1f} ms "
            f"against the Approve's {p50['approve_to_run']:.1f} ms; the table's RPC column is what each path asks of "
            "Firestore before the model (an edit adds the schema check, the edited call's digest and the card "
            "showing both calls to the decision's transaction)."
        )
    return section

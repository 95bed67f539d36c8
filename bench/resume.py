"""Figure 10: resuming costs no more than starting: an operator's click to the continuation's first model request.

How it is measured and read: ``bench/sections/resume.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

from typing import Any

from bench import paths
from bench.cost import compact
from bench.figures import Section, missed, paired_ratio, percentile, table, text
from bench.harness import Bench
from bench.paths import Sample
from bench.rig import Rig
from infra.fakes.gemini.client import FakeGemini
from shared.handlers import slack_events, slack_interactivity
from shared.state import approvals, ids, questions
from shared.state.models import Approval, WaitKind

REPS = 30
WARMUP = 2
RATIO_LIMIT = 1.2
PATHS = ("mention", "answer_click", "approve_click")


def mention(rig: Rig) -> Sample:
    request = rig.mention("what is the status?")
    rig.script(FakeGemini.text("All green."))
    return paths.timed(rig, slack_events.handle, request, lambda reply: str(reply["session_id"]))


def answer_click(rig: Rig) -> Sample:
    asks = FakeGemini.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"])
    question = questions.get_question(rig.session(rig.paused("set up the database", asks)).awaited_question or "")
    assert question is not None, "the session paused without a question"
    request = rig.answer_press(question)
    rig.script(FakeGemini.text("Going with postgres."))

    def continuation(reply: dict[str, Any]) -> str:
        assert reply.get("answer") == "answered", reply
        return ids.resumed_by(question.question_id)

    return paths.timed(rig, slack_interactivity.handle, request, continuation)


def paused_on_a_card(rig: Rig) -> tuple[str, Approval]:
    """A session paused on the approval card of its one approve-tier call (posted)."""
    session_id = rig.paused("scale the api", FakeGemini.call("scale_service", name="api", replicas=3))
    [approval] = approvals.get_approvals(rig.session(session_id).awaited(WaitKind.APPROVAL))
    return session_id, approval


def approve_click(rig: Rig, *, answer: str = "Scaled.") -> Sample:
    session_id, approval = paused_on_a_card(rig)
    request = rig.approve_press(approval, rig.session(session_id).origin.thread_ts)
    rig.script(FakeGemini.text(answer))

    def resumption(reply: dict[str, Any]) -> str:
        assert reply.get("decision") == "decided", reply
        return ids.resume_id(session_id, approval.seq)

    return paths.timed(rig, slack_interactivity.handle, request, resumption)


def measure(rig: Rig, reps: int = REPS, warmup: int = WARMUP) -> dict[str, list[Sample]]:
    """Every path ``reps`` times, in rotating order, after ``warmup`` runs of each."""
    return paths.take_turns(rig, {"mention": mention, "answer_click": answer_click, "approve_click": approve_click},
                            reps, warmup)  # fmt: skip


def run(bench: Bench) -> Section:
    section = Section("10. Resuming after the operator")
    samples = paths.on_stack(bench, measure)
    rows = paths.report(section, samples, lambda path, q: f"resume_{path}_to_first_model_request_p{q}")
    ms = paths.ms_of(samples)
    base = {q: percentile(ms["mention"], q) for q in (50, 95)}
    for path in PATHS[1:]:
        for q in (50, 95):
            section.add(*paired_ratio(f"resume_{path}_over_mention_p{q}", ms[path], ms["mention"], q,
                                      RATIO_LIMIT).figures())  # fmt: skip
    ops = {path: samples[path][-1].ops for path in PATHS}
    header = [*paths.HEADER, "p50 / mention's", "p95 / mention's", "reads/writes/queries before it"]
    rows = [(*row, percentile(ms[row[0]], 50) / base[50], percentile(ms[row[0]], 95) / base[95],
             f"{ops[row[0]].reads}/{ops[row[0]].writes}/{ops[row[0]].queries}") for row in rows]  # fmt: skip
    section.say(
        *text("resume"),
        table(header, rows),
        "The Firestore RPCs of each path before its first model request, in order (the last repetition; "
        "`txn(...)` is a transaction, as in section 3):",
        table(["path", "RPCs"], [(path, ", ".join(compact(ops[path].trace))) for path in PATHS]),
    )
    if missed(section.figures):
        rpcs = {path: ops[path].rpcs for path in PATHS}
        section.say(*text("resume_missed", missed=missed(section.figures), answer=rpcs["answer_click"],
                          approve=rpcs["approve_click"], mention=rpcs["mention"]))  # fmt: skip
        section.findings.append(
            f"Resuming takes {percentile(ms['answer_click'], 50) / base[50]:.1f} (answer) and "
            f"{percentile(ms['approve_click'], 50) / base[50]:.1f} (approval) times a mention's time to the first "
            f"model request (section 10): {rpcs['answer_click']} and {rpcs['approve_click']} "
            f"Firestore RPCs before the model is asked, against {rpcs['mention']} (an answer's continuation reads "
            "the question and the transcript's steps in its claim's batch and stores its resumed step in the claim's "
            "commit; the status under the thread is set beside the model's request). Left: the "
            "click's handler (its read, commit and Slack acknowledgement before the continuation is delivered), and "
            "for an approval the approved call's started record (one commit fenced by the lease) and the example "
            "tool's own Slack post and write before its resumed step's one commit (its card's two updates are made "
            "beside them and beside the model's request)."
        )
    return section

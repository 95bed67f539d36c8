"""Figure 10: resuming costs no more than starting: an operator's click to the continuation's first model request.

How it is measured and read: ``bench/sections/resume.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from bench import paths
from bench.cost import compact
from bench.figures import Section, info, missed, paired_ratio, percentile, table, text
from bench.harness import Bench
from bench.paths import Sample
from bench.rig import Rig
from infra.fakes.gemini.client import FakeGemini
from shared.agent.tools import team
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

    with example_tool_timed() as spent:
        sample = paths.timed(rig, slack_interactivity.handle, request, resumption)
    return replace(sample, call_ms=sum(spent))


@contextmanager
def example_tool_timed() -> Iterator[list[float]]:
    """The ms the example tools' own work takes each time they run (``team._record``: their Slack post and their
    record), for the block only."""
    spent: list[float] = []
    original = team._record

    def timed(*args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        try:
            original(*args, **kwargs)
        finally:
            spent.append((time.perf_counter() - began) * 1000)

    team._record = timed
    try:
        yield spent
    finally:
        team._record = original


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
    # The approval's resumption less its approved call's own work (the example tool's post and record): what
    # resuming costs beside the call it runs (no target: the call is work a mention does not do).
    less_call = [sample.ms - sample.call_ms for sample in samples["approve_click"]]
    section.add(info("resume_approve_call_own_ms_p50", percentile([s.call_ms for s in samples["approve_click"]], 50),
                     "ms"))  # fmt: skip
    for q in (50, 95):
        ratio = paired_ratio(f"resume_approve_click_less_its_call_over_mention_p{q}", less_call, ms["mention"], q,
                             RATIO_LIMIT)  # fmt: skip
        section.add(*[info(f.name, f.value, f.unit) for f in ratio.figures()])
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
        less = {f.name: f.value for f in section.figures if "_less_its_call_" in f.name}
        section.say(*text("resume_missed", missed=missed(section.figures), answer=rpcs["answer_click"],
                          approve=rpcs["approve_click"], mention=rpcs["mention"],
                          call_ms=percentile([s.call_ms for s in samples["approve_click"]], 50),
                          less50=less["resume_approve_click_less_its_call_over_mention_p50"],
                          less95=less["resume_approve_click_less_its_call_over_mention_p95"]))  # fmt: skip
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

"""Figure 16: a turn that waits on three kinds of thing at once, from the last one resolved to the resumed turn's
first model request (issue 28.5).

A session's one model turn asks the operator (``ask_operator`` with options), makes an approve-tier call
(``scale_service``) and delegates a blocking task, in one response and without call ids, as Gemini sends them; the
session pauses once, waiting on all three. Two of them are resolved before the clock starts; the third is timed,
each kind last in turn, repetition by repetition:

- answer last: the operator's press of an option on the question, through the slack_interactivity handler, then
  the resumption's delivery, to its first model request;
- approve last: the operator's Approve on the card, the same way (the resumption runs the approved call once
  through the ledger before the model is asked);
- child last: the child's delivery, from its model request (its answer; the stub replies at once) through its end
  stored and reported, then the resumption's delivery, to the resumption's first model request.

Everything runs in this process through the handlers the functions serve, against the emulators, the fake Slack
and the Gemini stub, counted as section 3 counts; the Cloud Tasks hop is left out, as in section 10. The figures
are the p50 and p95 over the repetitions, of each kind last and of all together.
"""

from __future__ import annotations

import time
import uuid

from bench import paths
from bench.figures import Section, info, percentile, prose, table
from bench.harness import Bench
from bench.paths import Sample
from bench.rig import Rig
from infra.fakes.gemini.client import FakeGemini
from shared.handlers import slack_interactivity
from shared.state import approvals, ids, questions
from shared.state.models import SessionStatus

REPS = 5
WARMUP = 0  # the figures before it warmed the clients
KINDS = ("answer", "approve", "child")


class Turn:
    """A session paused on one turn's question, approval card and blocking child."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        task = f"resize the workers [{uuid.uuid4().hex[:10]}]"
        calls = [("ask_operator", {"question": "Which region?", "options": ["us-east", "eu-west"]}),
                 ("scale_service", {"name": "api", "replicas": 3}), ("delegate", {"task": task})]  # fmt: skip
        rig.script({"function_calls": [{"name": name, "args": args, "id": None} for name, args in calls]})
        rig.gemini.script(FakeGemini.matching(task, FakeGemini.text("The workers run 4 replicas.")))
        rig.script(FakeGemini.text("All three are done."))
        self.parent = rig.start("resize the api and the workers")
        rig.deliver(self.parent)
        rig.expect(self.parent, SessionStatus.PAUSED)
        self.child = ids.child_id(self.parent, 1, 2)
        self.resumed = ids.resume_id(self.parent, 1)

    def press(self, kind: str) -> tuple[bytes, dict[str, str]]:
        """The operator's signed press that resolves the question (``answer``) or the card (``approve``)."""
        thread = self.rig.session(self.parent).origin.thread_ts
        if kind == "answer":
            question = questions.get_question(ids.question_id(self.parent, 1, 0))
            assert question is not None, "no question"
            return self.rig.answer_press(question)
        approval = approvals.get_approval(ids.approval_id(self.parent, 1, 1))
        assert approval is not None, "no approval"
        return self.rig.approve_press(approval, thread)

    def resolve(self, kind: str) -> None:
        if kind == "child":
            self.rig.deliver(self.child)
            self.rig.expect(self.child, SessionStatus.DONE)
        else:
            reply, status = slack_interactivity.handle(*self.press(kind))
            assert status == 200, reply
        self.rig.expect(self.parent, SessionStatus.PAUSED)  # still waiting on the last one

    def last(self, kind: str) -> Sample:
        if kind != "child":
            return paths.timed(self.rig, slack_interactivity.handle, self.press(kind), lambda _reply: self.resumed)
        self.rig.counter.reset()
        with paths.model_requests(self.rig.counter) as calls:
            self.rig.deliver(self.child)
            ended = time.perf_counter()
            self.rig.deliver(self.resumed)
        self.rig.expect(self.resumed, SessionStatus.DONE)
        assert len(calls) >= 2, f"{len(calls)} model requests"
        (began, before), (at, ops) = calls[0], calls[1]
        return Sample((at - began) * 1000, (ended - began) * 1000, ops - before)


def last(kind: str) -> paths.Path:
    def path(rig: Rig) -> Sample:
        turn = Turn(rig)
        for other in KINDS:
            if other != kind:
                turn.resolve(other)
        return turn.last(kind)

    return path


def measure(rig: Rig, reps: int = REPS, warmup: int = WARMUP) -> dict[str, list[Sample]]:
    """Each kind resolved last ``reps`` times, in rotating order, after ``warmup`` runs of each."""
    return paths.take_turns(rig, {f"{kind}_last": last(kind) for kind in KINDS}, reps, warmup)


def run(bench: Bench) -> Section:
    section = Section("16. A turn that waits on three kinds of thing at once")
    samples = paths.on_stack(bench, measure)
    rows = paths.report(section, samples, lambda path, q: f"mixed_wait_{path}_to_first_model_request_p{q}")
    every = [sample.ms for found in samples.values() for sample in found]
    rows.append(("any last", len(every), percentile(every, 50), percentile(every, 95), None, None))
    section.add(
        info("mixed_wait_last_resolution_to_first_model_request_p50", percentile(every, 50), "ms"),
        info("mixed_wait_last_resolution_to_first_model_request_p95", percentile(every, 95), "ms"),
    )
    section.glance = [f for f in section.figures if f.name.startswith("mixed_wait_last_resolution")]
    section.say(*prose(__doc__), table(paths.HEADER, rows))
    return section

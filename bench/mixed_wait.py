"""Figure 16: a turn that waits on three kinds of thing at once, from the last one resolved to the resumed turn's
first model request (issue 28.5).

How it is measured and read: ``bench/sections/mixed_wait.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import time
import uuid

from bench import paths
from bench.figures import Section, info, percentile, table, text
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
    section.say(*text("mixed_wait"), table(paths.HEADER, rows))
    return section

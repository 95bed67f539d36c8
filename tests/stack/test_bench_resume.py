"""The resumption benchmark's paths (``bench/resume.py``) run on the test stack: each click resumes its session, and
the first model request is timed after the work that precedes it."""

from __future__ import annotations

import pytest

from bench import resume
from infra.stack import Stack
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("streams", ["true", "false"])
def test_each_path_reaches_its_first_model_request(stack: Stack, monkeypatch: pytest.MonkeyPatch, streams: str) -> None:
    """With answers streamed (the product's default, as on the benchmark's stack) and without."""
    with counted_rig(stack, monkeypatch, SLACK_STREAM=streams) as rig:
        samples = resume.measure(rig, reps=1, warmup=0)
        rig.script_used()
    assert set(samples) == set(resume.PATHS)
    for path, [sample] in samples.items():
        assert 0 < sample.handler_ms < sample.ms, path
        assert sample.ops.rpcs > 0, path
    # A click resumes a paused conversation: it reads what the mention's first claim has no need to.
    assert samples["answer_click"][0].ops.reads > samples["mention"][0].ops.reads
    assert samples["approve_click"][0].ops.writes > samples["answer_click"][0].ops.writes

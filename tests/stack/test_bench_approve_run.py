"""The approve → run and edit → run benchmark's paths (``bench/approve_run.py``) run on the test stack: each
decision resumes its session, runs the call (the edited one for an edit) once, and the model gets its result."""

from __future__ import annotations

import pytest

from bench import approve_run
from infra.stack import Stack
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


def test_both_paths_run_the_call_and_reach_the_model(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    with counted_rig(stack, monkeypatch) as rig:
        samples = approve_run.measure(rig, reps=1, warmup=0)
        rig.script_used()
    assert set(samples) == set(approve_run.PATHS)
    for path, [sample] in samples.items():
        assert 0 < sample.handler_ms < sample.ms, path
        assert sample.ops.rpcs > 0, path

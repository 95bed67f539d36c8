"""The approve → run and edit → run benchmark's paths (``bench/approve_run.py``) run on the test stack: each
decision resumes its session, runs the call (the edited one for an edit) once, and the model gets its result."""

from __future__ import annotations

import pytest

from bench import approve_run
from infra.stack import Stack
from tests.bench_paths import each_path_once

pytestmark = pytest.mark.stack


def test_both_paths_run_the_call_and_reach_the_model(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(each_path_once(stack, monkeypatch, approve_run.measure)) == set(approve_run.PATHS)

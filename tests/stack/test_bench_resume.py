"""The resumption benchmark's paths (``bench/resume.py``) run on the test stack: each click resumes its session, and
the first model request is timed after the work that precedes it."""

from __future__ import annotations

import pytest

from bench import resume
from infra.stack import Stack
from tests.bench_paths import each_path_once

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("streams", ["true", "false"])
def test_each_path_reaches_its_first_model_request(stack: Stack, monkeypatch: pytest.MonkeyPatch, streams: str) -> None:
    """With answers streamed (the product's default, as on the benchmark's stack) and without."""
    samples = each_path_once(stack, monkeypatch, resume.measure, SLACK_STREAM=streams)
    assert set(samples) == set(resume.PATHS)
    # A click resumes a paused conversation: it reads what the mention's first claim has no need to.
    assert samples["answer_click"].ops.reads > samples["mention"].ops.reads
    assert samples["approve_click"].ops.writes > samples["answer_click"].ops.writes
    # Only the approval runs a call before its first model request: its own work is timed apart, inside the path.
    assert 0 < samples["approve_click"].call_ms < samples["approve_click"].ms
    assert samples["mention"].call_ms == samples["answer_click"].call_ms == 0

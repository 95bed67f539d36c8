"""A benchmark's timed paths run once each on the test stack, as its tests check them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.paths import Sample
from bench.rig import Rig
from infra.stack import Stack
from tests.rigs import counted_rig

Measure = Callable[[Rig, int, int], dict[str, list[Sample]]]  # a figure's measure(rig, reps, warmup)


def each_path_once(stack: Stack, monkeypatch: pytest.MonkeyPatch, measure: Measure, **env: str) -> dict[str, Sample]:
    """Every path of ``measure`` once, no warm-up, with ``env`` set: each its one sample, which took longer than its
    handler alone and counted Firestore calls. The model's script is used up."""
    with counted_rig(stack, monkeypatch, **env) as rig:
        samples = measure(rig, 1, 0)
        rig.script_used()
    once: dict[str, Sample] = {}
    for path, [sample] in samples.items():
        assert 0 < sample.handler_ms < sample.ms, path
        assert sample.ops.rpcs > 0, path
        once[path] = sample
    return once

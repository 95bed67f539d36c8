"""Before and after (``bench/compare.py``): times corrected by the machine's own slow-down, slower flows named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import compare


def figures(**values: tuple[float, str]) -> dict[str, dict[str, Any]]:
    return {name: {"name": name, "value": v, "unit": unit, "target": None, "met": None} for name, (v, unit) in
            values.items()}  # fmt: skip


def test_a_time_is_compared_over_the_machine_and_a_slower_flow_is_named() -> None:
    control = compare.CONTROLS[0]
    before = figures(**{control: (100.0, "ms")}, flow_ms=(10.0, "ms"), slow_ms=(10.0, "ms"), flow_ratio=(1.0, "ratio"))
    now = figures(**{control: (200.0, "ms")}, flow_ms=(20.0, "ms"), slow_ms=(30.0, "ms"), flow_ratio=(1.1, "ratio"))
    text = compare.render("abc123", before, now)
    assert "2.00x" in text  # the machine's slow-down, from the control
    assert "| `flow_ms` | ms | 10.0 | 20.0 | 2.000 | 1.000 |" in text  # as slow as the machine: not named
    assert "- `slow_ms`: 1.50x: unexplained" in text
    assert "| `flow_ratio` | ratio | 1.000 | 1.100 | 1.100 | — |" in text  # measured side by side: no correction
    assert f"- `{control}`" not in text


def test_the_section_replaces_its_old_self_before_the_fault_injection(tmp_path: Path) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    markdown.write_text("# Benchmarks\n\n## 1. Ingress\n\nx\n\n## Fault injection\n\nkept\n")
    compare.write_into(markdown, f"{compare.TITLE}\n\nfirst")
    compare.write_into(markdown, f"{compare.TITLE}\n\nsecond")
    text = markdown.read_text()
    assert text.count(compare.TITLE) == 1
    assert "second" in text
    assert "first" not in text
    assert text.index(compare.TITLE) < text.index("## Fault injection")
    assert text.endswith("kept\n")

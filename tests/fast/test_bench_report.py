"""The benchmarks' report writer (``bench/report.py``): every target in the summary, and no miss left unexplained."""

from __future__ import annotations

from pathlib import Path

from bench import report
from bench.figures import Section, at_most, info


def written(tmp_path: Path, *sections: Section) -> str:
    markdown, results = tmp_path / "BENCHMARKS.md", tmp_path / "results.json"
    report.write(list(sections), runtime=1.0, load_at_start=[0.0, 0.0, 0.0], markdown=markdown, results=results)
    return markdown.read_text()


def test_a_miss_its_module_does_not_explain_is_said_to_be_unexplained(tmp_path: Path) -> None:
    quiet = Section("1. Quiet", figures=[at_most("quiet_ratio", 2.0, "ratio", 1.0)])
    told = Section("2. Told", figures=[at_most("told_ratio", 2.0, "ratio", 1.0)], body=["**Missed: `told_ratio`.** x"])
    text = written(tmp_path, quiet, told)
    assert text.count("has no account of a miss") == 1
    assert "**Missed: `quiet_ratio` (2.000).** This figure's module has no account" in text


def test_the_summary_counts_targets_and_shows_the_glance_without_one(tmp_path: Path) -> None:
    paths = Section("3. Paths", figures=[info("path_p50", 5.0, "ms"), at_most("path_ratio", 0.5, "ratio", 1.0)])
    paths.glance = list(paths.figures)
    summary = written(tmp_path, paths).split("## 3. Paths")[0]
    assert "1 of 1 targets met" in summary
    assert "`path_p50`" in summary

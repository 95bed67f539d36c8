"""The local stack's own promises: clear errors for missing pieces, and nothing left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra import procs
from infra import stack as local
from infra.procs import Proc, StackError

ROOT = Path(__file__).resolve().parents[2]


def _path_without(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keep: list[str]) -> None:
    """A PATH holding only links to the named tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in keep:
        real = subprocess.run(["which", tool], capture_output=True, text=True, check=False).stdout.strip()
        if real:
            (bin_dir / tool).symlink_to(real)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_missing_gcloud_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _path_without(monkeypatch, tmp_path, keep=["java"])
    with pytest.raises(StackError, match=r"gcloud is not installed.*cloud-firestore-emulator"):
        local.preflight()


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _path_without(monkeypatch, tmp_path, keep=["gcloud"])
    with pytest.raises(StackError, match=r"java is not installed"):
        local.preflight()


def test_missing_firestore_component_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_sdk = tmp_path / "sdk"
    (fake_sdk / "bin").mkdir(parents=True)
    (fake_sdk / "bin" / "gcloud").write_text("#!/bin/sh\nexit 0\n")
    (fake_sdk / "bin" / "gcloud").chmod(0o755)
    java = subprocess.run(["which", "java"], capture_output=True, text=True, check=False).stdout.strip()
    (fake_sdk / "bin" / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(fake_sdk / "bin"))
    with pytest.raises(StackError, match=r"Firestore emulator component is missing.*gcloud components install"):
        local.preflight()


def _shell(tmp_path: Path, name: str, script: str) -> Proc:
    """A started shell running ``script`` in its own process group, given a moment to fork."""
    proc = Proc(name=name, argv=["sh", "-c", script], log_path=tmp_path / f"{name}.log", env=dict(os.environ),
                cwd=tmp_path).start()  # fmt: skip
    time.sleep(0.2)
    return proc


def test_a_stopped_proc_leaves_no_process_in_its_group(tmp_path: Path) -> None:
    """A child that forks grandchildren (as gcloud starts a JVM) is stopped with all of them."""
    proc = _shell(tmp_path, "forker", "sleep 300 & sleep 300 & wait")
    pgid = proc.pid
    assert procs.group_alive(pgid)
    proc.stop(timeout=5)
    assert not procs.group_alive(pgid)


def test_a_process_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    proc = _shell(tmp_path, "stubborn", "trap '' TERM; sleep 300 & wait")
    pgid = proc.pid
    proc.stop(timeout=0.5)
    assert not procs.group_alive(pgid)


def test_stack_file_lists_every_piece(stack: local.Stack) -> None:
    info = json.loads(stack.stack_file.read_text())
    assert set(info["functions"]) == {"slack_events", "slack_interactivity", "agent_session", "sweep"}
    for key in ("firestore", "tasks", "fake_slack", "fake_gemini"):
        assert info[key]
    for pid in info["pids"].values():
        assert procs.group_alive(pid)


def test_an_interrupted_run_leaves_nothing_behind(tmp_path: Path) -> None:
    """SIGINT to `python -m infra.stack up` (what Ctrl-C sends) stops every process it started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_"))}
    output = tmp_path / "up.log"  # a file, not a pipe: a pipe nobody reads can block the run it watches
    with output.open("w") as sink:
        runner = subprocess.Popen(
            [sys.executable, "-m", "infra.stack", "up", "--stack-file", str(tmp_path / "s.json")],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "s.json").exists():
            assert runner.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "the stack did not come up"
            time.sleep(0.2)
        pids = json.loads((tmp_path / "s.json").read_text())["pids"]
        assert len(pids) == 9  # the emulators, the fakes, the dispatcher, the sample MCP server, the functions
        os.kill(runner.pid, signal.SIGINT)
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the stack did not stop within 60 s of SIGINT; it printed:\n{output.read_text()[-4000:]}")
        assert not any(procs.group_alive(pid) for pid in pids.values())
        assert not (tmp_path / "s.json").exists()
    finally:
        procs.stop_group(runner.pid, timeout=5, reap=runner.poll)

"""`make dev`: a whole conversation from the terminal chat, offline with the labelled demo model."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infra import procs

ROOT = Path(__file__).resolve().parent.parent


def test_a_terminal_conversation_with_an_ask_and_an_answer(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_", "GEMINI_"))}
    env.pop("GOOGLE_GENAI_USE_VERTEXAI", None)
    dev = subprocess.Popen(
        [sys.executable, "-m", "infra.dev", "--stack-file", str(tmp_path / "stack.json")],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert dev.stdout is not None
    assert dev.stdin is not None
    out = dev.stdout

    def pump() -> None:
        for line in out:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()

    def expect(text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in seen):
            assert time.monotonic() < deadline, f"never saw {text!r}; output:\n{''.join(seen)}"
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                assert dev.poll() is None, f"make dev exited early:\n{''.join(seen)}"

    try:
        expect("using the DEMO MODEL")
        expect("Chatting in")
        dev.stdin.write("please pick a database\n")
        dev.stdin.flush()
        expect("[demo model] Which option should I use for: <@U0LOCALBOT> please pick a database")
        expect("[2] Option B")
        dev.stdin.write("2\n")  # a thread reply with the option number
        dev.stdin.flush()
        expect("[demo model] Thanks — the operator answered: 2")
        pids = procs_of_stack(tmp_path / "stack.json")
        dev.stdin.close()
        dev.wait(timeout=60)
        assert not any(procs.group_alive(pid) for pid in pids)
    finally:
        procs.stop_group(dev.pid, timeout=10, reap=dev.poll)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_make_dev_stopped_by_a_signal_leaves_nothing_running(tmp_path: Path, signum: int) -> None:
    """`timeout`, a closed terminal or CI stop `make dev` with a signal, not Ctrl-C: the stack must stop too."""
    stack_file = tmp_path / "stack.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_", "GEMINI_"))}
    dev = subprocess.Popen(
        [sys.executable, "-m", "infra.dev", "--stack-file", str(stack_file)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not stack_file.exists():
            assert dev.poll() is None, "make dev exited before its stack came up"
            assert time.monotonic() < deadline, "the stack did not come up"
            time.sleep(0.2)
        pids = procs_of_stack(stack_file)
        os.kill(dev.pid, signum)
        dev.wait(timeout=60)
        assert not any(procs.group_alive(pid) for pid in pids)
        assert not stack_file.exists()
    finally:
        procs.stop_group(dev.pid, timeout=10, reap=dev.poll)


def procs_of_stack(stack_file: Path) -> list[int]:
    import json

    info = json.loads(stack_file.read_text())
    return [int(pid) for pid in info["pids"].values()]

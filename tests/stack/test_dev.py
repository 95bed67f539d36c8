"""`make dev`, `make stack` + `make chat`, `make down` and `make admin` as a newcomer meets them: a whole
conversation offline with the labelled demo model, one-line answers when no stack runs, and a terminal left as it
was found however the run ends (even `kill -9`)."""

from __future__ import annotations

import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from infra import procs
from infra import stack as local
from infra.chat import extract_buttons
from infra.fakes.slack import FakeSlack
from ops import admin
from shared import config

ROOT = Path(__file__).resolve().parents[2]


def make_dev(stack_file: Path, *, stdout: int) -> subprocess.Popen[str]:
    """`make dev` in its own session, on the demo model (no Slack, Cloud Tasks, Firestore or Gemini settings of this
    shell), its terminal a pipe; ``stdout``: PIPE (merged with stderr, as text) or DEVNULL (both)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_", "GEMINI_"))}
    env.pop("GOOGLE_GENAI_USE_VERTEXAI", None)
    return subprocess.Popen([sys.executable, "-m", "infra.dev", "--stack-file", str(stack_file)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip


def test_a_terminal_conversation_with_an_ask_and_an_answer(tmp_path: Path) -> None:
    dev = make_dev(tmp_path / "stack.json", stdout=subprocess.PIPE)
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
        expect("The workspace: http://127.0.0.1:")
        expect("Chatting in")
        dev.stdin.write("please pick a database\n")
        dev.stdin.flush()
        expect("[demo model] Which database should I use for: please pick a database?")  # no raw <@U…> mention
        expect("[2] SQLite")  # an option that says what it is
        dev.stdin.write("2\n")  # a thread reply with the option number
        dev.stdin.flush()
        expect("[demo model] Thanks — the operator answered: 2")
        pids = procs_of_stack(tmp_path / "stack.json")
        dev.stdin.close()
        expect("Stopping the local stack: firestore, tasks, fake_slack")  # leaving says what it stops
        dev.wait(timeout=60)
        assert not any(procs.group_alive(pid) for pid in pids)
    finally:
        procs.stop_group(dev.pid, timeout=10, reap=dev.poll)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_make_dev_stopped_by_a_signal_leaves_nothing_running(tmp_path: Path, signum: int) -> None:
    """`timeout`, a closed terminal or CI stop `make dev` with a signal, not Ctrl-C: the stack must stop too."""
    stack_file = tmp_path / "stack.json"
    dev = make_dev(stack_file, stdout=subprocess.DEVNULL)
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
    info = json.loads(stack_file.read_text())
    return [int(pid) for pid in info["pids"].values()]


def clean_env() -> dict[str, str]:
    """A newcomer's shell: none of the product's settings the test stack put in os.environ."""
    product = {var.name for var in config.VARIABLES} | {"GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_API_KEY"}
    return {k: v for k, v in os.environ.items() if k not in product and not k.startswith(("TASKS_", "FIRESTORE_"))}


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.2)


@pytest.mark.parametrize("command", ["list", "sweep"])
def test_admin_without_a_stack_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert admin.main([command, "--stack-file", str(tmp_path / "stack.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("no local stack in ")
    assert err.count("\n") == 1


def test_make_down_without_a_stack_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert local.main(["down", "--stack-file", str(tmp_path / "stack.json")]) == 0
    assert "No local stack is recorded" in capsys.readouterr().err


def test_make_stack_then_make_chat_talks_to_the_demo_model_as_an_operator(tmp_path: Path) -> None:
    """The documented pair: `make stack` in one terminal, `make chat` in another, `make down` to finish."""
    stack_file = tmp_path / "stack.json"
    log = (tmp_path / "stack.log").open("w")
    up = [sys.executable, "-m", "infra.stack", "up", "--stack-file", str(stack_file)]
    stack = subprocess.Popen(up, cwd=ROOT, env=clean_env(), stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for(stack_file.exists, "the stack coming up")
        chat = subprocess.run(
            [sys.executable, "-m", "infra.chat", "--stack-file", str(stack_file), "--interval", "0.2"],
            check=False,
            cwd=ROOT,
            env=clean_env(),
            input="please pick a database\n/shrug\n",
            capture_output=True,
            text=True,
            timeout=120,  # a cold chat process and its first model call on a busy machine
        )
        assert "/shrug is not a command here: nothing was sent" in chat.stdout
        fake = json.loads(stack_file.read_text())["fake_slack"]
        slack = FakeSlack(fake)
        [root] = slack.messages("C0LOCAL")
        question = slack.wait_for_bot_replies("C0LOCAL", root["ts"], timeout=60)[0]
        assert question["text"].startswith(":speech_balloon:")  # the demo model asked, not a script that ran out
        assert "[demo model] Which database should I use" in question["text"]
        option_b = extract_buttons(question)[1]
        assert option_b["text"] == "SQLite"
        slack.click(local.CHAT_USER, "C0LOCAL", question["ts"], option_b["action_id"])
        answered = "the operator answered: SQLite"  # a streamed answer: its text arrives after the message
        wait_for(lambda: answered in str(slack.bot_replies("C0LOCAL", root["ts"])[-1].get("text")), answered, 60)
        assert len(slack.bot_replies("C0LOCAL", root["ts"])) == 2
        assert not [e for e in slack.ephemerals("C0LOCAL") if "Only the operators" in e["text"]]
        pids = procs_of_stack(stack_file)
        down = subprocess.run(
            [sys.executable, "-m", "infra.stack", "down", "--stack-file", str(stack_file)],
            check=True, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert f"Stopping the local stack of pid {stack.pid}" in down.stderr
        assert "The local stack is stopped." in down.stdout  # make down says it stopped
        assert stack.wait(timeout=30) == 0  # a stop asked for is a normal end: no "make: *** Error 143"
        assert "The local stack is stopped." in (tmp_path / "stack.log").read_text()
        assert not any(procs.group_alive(pid) for pid in pids)
    finally:
        procs.stop_group(stack.pid, timeout=10, reap=stack.poll)
        log.close()


@pytest.mark.parametrize("victim", ["make dev", "its worker"])
def test_a_kill_9_leaves_the_terminal_echoing_and_nothing_running(tmp_path: Path, victim: str) -> None:
    stack_file = tmp_path / "stack.json"
    primary, secondary = pty.openpty()
    dev = subprocess.Popen(
        [sys.executable, "-m", "infra.dev", "--stack-file", str(stack_file)],
        cwd=ROOT, env=clean_env(), stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
    )  # fmt: skip
    shown = b""
    try:
        deadline = time.monotonic() + 120
        while b"you> " not in shown:
            assert time.monotonic() < deadline, shown.decode(errors="replace")
            assert dev.poll() is None, shown.decode(errors="replace")
            if select.select([primary], [], [], 0.5)[0]:
                shown += os.read(primary, 65536)
        time.sleep(0.5)
        assert not termios.tcgetattr(secondary)[3] & termios.ECHO  # readline reads with echo off

        pids = procs_of_stack(stack_file)
        owner = json.loads(stack_file.read_text())["owner"]
        os.kill(dev.pid if victim == "make dev" else owner, signal.SIGKILL)
        wait_for(lambda: not any(procs.group_alive(pid) for pid in pids), "the stack stopping", 60)
        wait_for(lambda: bool(termios.tcgetattr(secondary)[3] & termios.ECHO), "echo coming back", 60)
        wait_for(lambda: not stack_file.exists(), "the stack file going", 60)
    finally:
        procs.stop_group(dev.pid, timeout=10, reap=dev.poll)
        os.close(primary)
        os.close(secondary)

"""The local stack: real emulators, the functions under functions-framework, and the fakes.

``Stack`` is the one entry point that ``make dev``, the tests and the tools
share. It starts the Firestore emulator (gcloud), the Cloud Tasks emulator (its
own virtual environment, because it pins protobuf<5), the fake Slack Web API,
the Gemini stub, the sample MCP server (``mcp_demo``: ``make dev`` configures the
agent for it) and every function, each on a free loopback port; waits until
each answers; writes ``.local/stack.json`` with every URL; and stops every
process it started, by pid, when it is closed or the interpreter exits.

With ``parallel_tasks=True`` (``TASKS_DELIVERY=parallel`` for ``make dev`` and
``make stack``) it also starts the dispatcher (``infra/fakes/dispatch``): the emulator
dispatches every task to it, and it delivers them to agent_session as Cloud
Tasks does (in parallel, its headers, retried with backoff, a deadline).

    python -m infra.stack up     # run until Ctrl-C
    python -m infra.stack down   # stop what a previous run left behind
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from infra.fakes.gemini.demo import NOTICE as DEMO_NOTICE
from infra.procs import (
    Proc,
    StackError,
    free_port,
    group_alive,
    http_answers,
    reserved_port,
    stop_all,
    stop_groups,
    wait_until,
)
from ops.local_stack import STACK_FILE, alive, live_owner, started_here

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
CONSOLE_SLACK_VARS = ("SLACK_BOT_TOKEN", "SLACK_API_BASE_URL")
TASKS_VENV = ROOT / ".venv-tasks"

PROJECT = "local-project"
QUEUE = f"projects/{PROJECT}/locations/us-central1/queues/agent-sessions"
SIGNING_SECRET = "local-signing-secret"  # noqa: S105 - a fixed secret for the local fakes only
BOT_TOKEN = "xoxb-local-bot-token"  # noqa: S105
BOT_USER_ID = "U0LOCALBOT"
TEAM_ID = "T0LOCAL"
APP_ID = "A0LOCALAPP"
OPERATOR_ID = "U0OPERATOR"
CHAT_USER = "U0HUMAN"  # who you are in the terminal chat and, at first, in the workspace page
# You play both the requester and an operator, so you can answer the bot's questions yourself.
LOCAL_OPERATORS = {"OPERATOR_USER_IDS": f"{OPERATOR_ID},{CHAT_USER}", "OPERATOR_CHANNEL": "C0OPERATORS"}
GEMINI_KEY = "local-gemini-key"

FUNCTIONS = ("slack_events", "slack_interactivity", "agent_session", "sweep")
TASKS_DELIVERY = "TASKS_DELIVERY"  # serial (the emulator delivers itself) or parallel (through the dispatcher)


def parallel_tasks_from_env() -> bool:
    """What ``TASKS_DELIVERY`` asks ``make dev`` and ``make stack`` for: serial (the default) or parallel."""
    value = os.environ.get(TASKS_DELIVERY, "").strip().lower() or "serial"
    if value not in ("serial", "parallel"):
        raise StackError(f"{TASKS_DELIVERY} must be 'serial' or 'parallel', not {value!r}")
    return value == "parallel"


def has_real_model() -> bool:
    """Whether the environment reaches the real Gemini (an API key, or Vertex AI settings)."""
    vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in {"1", "true", "yes"}
    return bool(os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or vertex)


def for_people() -> dict[str, Any]:
    """What ``make dev`` and ``make stack`` start: the real model if there is one, else the demo model, you an
    operator, and the sample MCP server."""
    real = has_real_model()
    return {"demo_model": not real, "real_model": real, "extra_env": LOCAL_OPERATORS, "mcp_demo": True}


def preflight() -> Path:
    """Check the machine has what the emulators need; returns the gcloud SDK root."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise StackError(
            "gcloud is not installed: the Firestore emulator comes with the Google Cloud CLI. "
            "Install it from https://cloud.google.com/sdk/docs/install, then run "
            "`gcloud components install cloud-firestore-emulator`."
        )
    if shutil.which("java") is None:
        raise StackError(
            "java is not installed: the Firestore emulator needs a Java 11+ runtime. "
            "Install one, e.g. `apt-get install openjdk-17-jre-headless`."
        )
    sdk_root = Path(os.path.realpath(gcloud)).parent.parent
    if not (sdk_root / "platform" / "cloud-firestore-emulator").is_dir():
        raise StackError(
            "the gcloud Firestore emulator component is missing: run "
            "`gcloud components install cloud-firestore-emulator` "
            "(or `apt-get install google-cloud-cli-firestore-emulator`)."
        )
    if not (TASKS_VENV / "bin" / "gcloud-tasks-emulator").exists():
        raise StackError(f"the Cloud Tasks emulator is not installed in {TASKS_VENV}: run `make .venv-tasks`.")
    return sdk_root


@dataclass
class Stack:
    """Every process of the local stack, and the URLs and environment that reach them."""

    with_functions: tuple[str, ...] = FUNCTIONS
    extra_env: Mapping[str, str] = field(default_factory=dict)
    demo_model: bool = False
    real_model: bool = False  # use the real Gemini API (the caller's GEMINI_API_KEY or Vertex AI) instead of the stub
    # Tasks go from the emulator to the dispatcher, which delivers them to agent_session as Cloud Tasks does.
    parallel_tasks: bool = False
    dispatch_args: tuple[str, ...] = ()  # more `python -m infra.fakes.dispatch` flags (--deadline, --max-attempts, ...)
    mcp_demo: bool = False  # start the sample MCP server (infra/fakes/mcp) and configure the agent for it
    function_env: dict[str, dict[str, str]] = field(default_factory=dict)  # more environment, per function
    procs: dict[str, Proc] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    _reserved: dict[str, socket.socket] = field(
        default_factory=dict, repr=False
    )  # ports held until their server starts
    stack_file: Path = STACK_FILE
    wrote_stack_file: bool = False
    firestore_import: Path | None = None  # an export the Firestore emulator loads when it starts (a restart)

    @property
    def logs_dir(self) -> Path:
        return self.stack_file.parent / "logs"

    # --- addresses -------------------------------------------------------------------------
    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    @property
    def firestore_host(self) -> str:
        return f"127.0.0.1:{self.ports['firestore']}"

    @property
    def tasks_host(self) -> str:
        return f"127.0.0.1:{self.ports['tasks']}"

    def function_url(self, name: str) -> str:
        """The URL a function of this stack serves on; a stack started without it has none (empty)."""
        return self.url(name) + "/" if name in self.ports else ""

    def product_env(self) -> dict[str, str]:
        """The environment every function runs with; tests use it to reach the same Firestore."""
        # With parallel tasks the emulator dispatches to the dispatcher, which delivers to agent_session.
        tasks_target = self.url("dispatch") + "/" if self.parallel_tasks else self.function_url("agent_session")
        env = {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": self.firestore_host,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_API_BASE_URL": self.url("fake_slack") + "/api/",
            "OPERATOR_USER_IDS": OPERATOR_ID,
            "TASKS_QUEUE": QUEUE,
            "TASKS_TARGET_URL": tasks_target,
            "TASKS_EMULATOR_HOST": self.tasks_host,
            "REQUIRE_OIDC": "false",  # the Cloud Tasks emulator sends no OIDC token
            "MODEL_RETRY_ATTEMPTS": "3",
        }
        if not self.real_model:
            env.update(
                GEMINI_API_KEY=GEMINI_KEY,
                GOOGLE_GEMINI_BASE_URL=self.url("fake_gemini"),
                GEMINI_MODEL="demo-model" if self.demo_model else "gemini-local-stub",
            )
        if self.mcp_demo:
            env["MCP_SERVERS"] = json.dumps([{"name": "demo", "url": self.url("mcp_demo") + "/mcp"}])
        env.update(self.extra_env)
        return env

    def info(self) -> dict[str, Any]:
        return {
            "project": PROJECT,
            "queue": QUEUE,
            "firestore": self.firestore_host,
            "tasks": self.tasks_host,
            "fake_slack": self.url("fake_slack"),
            "fake_gemini": self.url("fake_gemini"),
            **({"dispatch": self.url("dispatch")} if self.parallel_tasks else {}),
            **({"mcp_demo": self.url("mcp_demo") + "/mcp"} if self.mcp_demo else {}),
            "functions": {name: self.function_url(name) for name in self.with_functions},
            "bot_user_id": BOT_USER_ID,
            "operator_user_id": OPERATOR_ID,
            "signing_secret": SIGNING_SECRET,
            "env": self.product_env(),
            "owner": os.getpid(),
            "pids": {name: proc.pid for name, proc in self.procs.items() if proc.alive()},
        }

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> Stack:
        sdk_root = preflight()
        if self.parallel_tasks and "agent_session" not in self.with_functions:
            raise StackError("parallel_tasks delivers tasks to agent_session: the stack must serve it")
        stop_leftovers(self.stack_file)
        dispatch = ("dispatch",) if self.parallel_tasks else ()
        mcp = ("mcp_demo",) if self.mcp_demo else ()
        order = ("firestore", "tasks", "fake_slack", "fake_gemini", *dispatch, *mcp, *self.with_functions)
        for name in order:
            if name not in self.ports:
                self._reserved[name] = reserved_port()
                self.ports[name] = int(self._reserved[name].getsockname()[1])
        atexit.register(self.stop)
        try:
            # Everything starts at once, in two waves: the emulators (which may move to another port) beside what
            # does not need their addresses; then what is given their addresses (the functions, the fake Slack's
            # console). A start waits on its own server only, so the slowest one sets the time, not their sum.
            _in_parallel(
                lambda: self._on_a_free_port("firestore", lambda: self._start_firestore(sdk_root)),
                lambda: self._on_a_free_port("tasks", self._start_tasks),
                self._start_fake_gemini,
                *([self._start_dispatch] if self.parallel_tasks else []),
                *([lambda: self.start_mcp_server("mcp_demo")] if self.mcp_demo else []),
            )
            _in_parallel(
                self._start_fake_slack,
                *(functools.partial(self.start_function, name) for name in self.with_functions),
            )
            # In the order they are named (and stopped in reverse), whichever came up first.
            self.procs = {name: self.procs[name] for name in order if name in self.procs} | self.procs
        except BaseException:
            self.stop()
            raise
        self.wrote_stack_file = True
        self._record()
        return self

    def _on_a_free_port(self, name: str, start: Callable[[], None], attempts: int = 3) -> None:
        """Start ``name``; if its port was taken meanwhile (a port is only free when it is picked: any outgoing
        connection may take it as its own before the emulator binds it), stop it and start it on another."""
        for attempt in range(attempts):
            try:
                start()
                return
            except StackError as exc:
                taken = any(sign in str(exc) for sign in ("Address already in use", "Failed to bind"))
                if not taken or attempt == attempts - 1:
                    raise
                failed = self.procs.pop(name, None)
                if failed is not None:
                    failed.stop()
                self.ports[name] = free_port()

    def _record(self) -> None:
        """Keep the stack file true to what runs (a restarted function has a new pid)."""
        if self.wrote_stack_file:
            self.stack_file.parent.mkdir(parents=True, exist_ok=True)
            self.stack_file.write_text(json.dumps(self.info(), indent=2))

    def stop(self) -> None:
        """Stop every process at once (one grace period for all, then SIGKILL); safe to call twice."""
        for held in self._reserved.values():
            held.close()
        self._reserved.clear()
        stopping = [self.procs.pop(name) for name in reversed(list(self.procs))]
        stop_all(stopping)
        if self.wrote_stack_file:
            self.stack_file.unlink(missing_ok=True)
            self.wrote_stack_file = False

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Proc:
        held = self._reserved.pop(name, None)
        if held is not None:
            held.close()  # its server binds the port next
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_"))}
        proc = Proc(
            name=name,
            argv=argv,
            log_path=self.logs_dir / f"{name}.log",
            env={**base, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=ROOT,
        )
        self.procs[name] = proc.start()
        return proc

    def _start_firestore(self, sdk_root: Path) -> None:
        gcloud = str(sdk_root / "bin" / "gcloud")
        keep = [f"--import-data={self.firestore_import}"] if self.firestore_import else []
        proc = self._spawn(
            "firestore",
            [gcloud, "emulators", "firestore", "start", f"--host-port={self.firestore_host}", "--quiet", *keep],
            {"CLOUDSDK_CORE_DISABLE_PROMPTS": "1"},
        )
        wait_until(lambda: http_answers(self.url("firestore")), proc=proc, what="HTTP on its port", timeout=90)

    def restart_emulator(self, name: str, *, attempts: int = 10) -> Proc:
        """Start the emulator ``name`` ("firestore" or "tasks"), stopped meanwhile, again on the same port (the
        product's clients reconnect to it); the port may be taken for a moment by an outgoing connection."""
        start = {"firestore": lambda: self._start_firestore(preflight()), "tasks": self._start_tasks}[name]
        for attempt in range(attempts):
            try:
                start()
                break
            except StackError as exc:
                if attempt == attempts - 1 or not any(s in str(exc) for s in ("Address already in use", "bind")):
                    raise
                self.procs.pop(name).stop()
                time.sleep(0.5)
        self._record()
        return self.procs[name]

    def _start_tasks(self) -> None:
        proc = self._spawn(
            "tasks",
            [
                str(TASKS_VENV / "bin" / "gcloud-tasks-emulator"),
                "start",
                f"--port={self.ports['tasks']}",
                f"--default-queue={QUEUE}",
            ],
            {"PYTHONWARNINGS": "ignore"},
        )
        wait_until(self._queue_exists, proc=proc, what=f"queue {QUEUE}", timeout=60)

    def _queue_exists(self) -> bool:
        import grpc
        from google.cloud import tasks_v2
        from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

        channel = grpc.insecure_channel(self.tasks_host)
        try:
            client = tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
            return bool(client.get_queue(name=QUEUE, timeout=1).name)
        finally:
            channel.close()

    def _start_fake_slack(self) -> None:
        slack = self._spawn(
            "fake_slack",
            [
                sys.executable,
                "-m",
                "infra.fakes.slack",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.ports["fake_slack"]),
                "--bot-token",
                BOT_TOKEN,
                "--signing-secret",
                SIGNING_SECRET,
                "--bot-user-id",
                BOT_USER_ID,
                "--team-id",
                TEAM_ID,
                "--app-id",
                APP_ID,
                "--events-url",
                self.function_url("slack_events") if "slack_events" in self.with_functions else "",
                "--interactivity-url",
                self.function_url("slack_interactivity") if "slack_interactivity" in self.with_functions else "",
                "--operators",
                self.product_env()["OPERATOR_USER_IDS"],
                "--notice",
                DEMO_NOTICE if self.demo_model else "",
                "--console",
            ],
            # the console's Firestore, and the bot's token and API (itself) to show people by name (users.info)
            {k: v for k, v in self.product_env().items() if not k.startswith("SLACK_") or k in CONSOLE_SLACK_VARS},
        )
        wait_until(lambda: http_answers(self.url("fake_slack") + "/_fake/calls"), proc=slack, what="HTTP", timeout=30)

    def _start_fake_gemini(self) -> None:
        gemini_args = [
            sys.executable,
            "-m",
            "infra.fakes.gemini",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.ports["fake_gemini"]),
            "--api-key",
            GEMINI_KEY,
        ]
        gemini = self._spawn("fake_gemini", gemini_args + (["--demo"] if self.demo_model else []))
        wait_until(
            lambda: http_answers(self.url("fake_gemini") + "/_stub/requests"), proc=gemini, what="HTTP", timeout=30
        )

    def _start_dispatch(self) -> None:
        """The dispatcher, delivering to agent_session with the dispatch deadline the product gives its tasks."""
        from shared.config import Settings

        deadline_var = Settings.tasks_dispatch_deadline_seconds
        deadline = self.product_env().get(deadline_var.name) or deadline_var.default or "900"
        proc = self._spawn(
            "dispatch",
            [
                sys.executable,
                "-m",
                "infra.fakes.dispatch",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.ports["dispatch"]),
                "--target",
                self.function_url("agent_session"),
                "--queue",
                QUEUE.rsplit("/", 1)[-1],
                "--deadline",
                deadline,
                *self.dispatch_args,
            ],
        )
        wait_until(lambda: http_answers(self.url("dispatch") + "/health"), proc=proc, what="HTTP", timeout=30)

    def start_mcp_server(self, name: str, *args: str) -> str:
        """Start a sample MCP server (``python -m infra.fakes.mcp``, more flags in ``args``) on a free loopback port
        as process ``name``; its MCP endpoint's URL. It stops with the stack, or with ``stop_process``."""
        self.ports.setdefault(name, free_port())
        proc = self._spawn(
            name,
            [sys.executable, "-m", "infra.fakes.mcp", "--host", "127.0.0.1", "--port", str(self.ports[name]), *args],
        )
        wait_until(lambda: http_answers(self.url(name) + "/calls"), proc=proc, what="HTTP", timeout=30)
        self._record()
        return self.url(name) + "/mcp"

    def stop_process(self, name: str) -> None:
        """Stop one process this stack started (SIGTERM, then SIGKILL), by its pid."""
        self.procs.pop(name).stop()
        self._record()

    def start_function(self, name: str) -> Proc:
        """Serve one entry point of functions/main.py with functions-framework on its port (with ``function_env``
        of that function on top of the product's environment)."""
        env = {**self.product_env(), **self.function_env.get(name, {}), "PYTHONPATH": str(ROOT)}
        proc = self._spawn(
            name,
            [
                sys.executable,
                "-m",
                "functions_framework",
                "--source",
                str(ROOT / "functions" / "main.py"),
                "--target",
                name,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.ports[name]),
            ],
            env,
        )
        wait_until(lambda: http_answers(self.function_url(name)), proc=proc, what="HTTP", timeout=60)
        self._record()
        return proc

    def kill_function(self, name: str) -> None:
        """SIGKILL a function's whole process group, as a crashed instance would die."""
        self.procs.pop(name).kill()
        self._record()


def _in_parallel(*starts: Callable[[], object]) -> None:
    """Run every start at once, each in its own thread; wait for all of them, then raise the first failure (the
    caller stops what did start)."""
    with ThreadPoolExecutor(max_workers=max(1, len(starts)), thread_name_prefix="stack-start") as pool:
        futures = [pool.submit(start) for start in starts]
        wait(futures)
    for future in futures:
        future.result()


def stop_leftovers(stack_file: Path = STACK_FILE) -> None:
    """Stop, by the pids it recorded, whatever an earlier run that was killed left running.

    If the run that wrote ``stack_file`` is still alive, its stack is in use: refuse
    rather than pull it from under its owner.
    """
    info, owner = live_owner(stack_file)
    if owner is not None:
        raise StackError(
            f"another local stack (pid {owner}) is running with {stack_file}; stop it first "
            "(Ctrl-C where it runs, or `make down`), or give this one another --stack-file."
        )
    left = {
        name: pid
        for name, pid in (info.get("pids") or {}).items()
        if isinstance(pid, int) and group_alive(pid) and started_here(pid)
    }
    if left:
        listed = ", ".join(f"{name} (pid {pid})" for name, pid in left.items())
        print(f"Stopping what an earlier local stack left running: {listed}", file=sys.stderr, flush=True)
        stop_groups(dict.fromkeys(left.values()), timeout=5)
    stack_file.unlink(missing_ok=True)


def stop_stack(stack_file: Path = STACK_FILE) -> None:
    """``make down``: stop the stack recorded in ``stack_file``, its owner first, then every recorded pid."""
    info, owner = live_owner(stack_file)
    if not info:
        print(f"No local stack is recorded in {stack_file}: nothing to stop.", file=sys.stderr)
    if owner is not None:
        print(f"Stopping the local stack of pid {owner} and its {len(info.get('pids') or {})} processes...",
              file=sys.stderr, flush=True)  # fmt: skip
        os.kill(owner, signal.SIGTERM)  # its own shutdown stops its children by pid
        deadline = time.monotonic() + 20
        while alive(owner) and time.monotonic() < deadline:
            time.sleep(0.1)
    stop_leftovers(stack_file)
    if info:
        print("The local stack is stopped.", flush=True)


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[Stack]:
    """A started stack, stopped on the way out; ``TASKS_DELIVERY`` decides ``parallel_tasks`` unless given."""
    if "parallel_tasks" not in kwargs:
        kwargs["parallel_tasks"] = parallel_tasks_from_env()
    stack = Stack(**kwargs).start()
    try:
        yield stack
    finally:
        stack.stop()


class SignalStop(SystemExit):
    """A signal asked the stack to stop (``make down``, ``timeout``, a closed terminal): a normal end, exit status
    0 (make would otherwise report ``Error 143``), with every ``finally`` block run on the way out."""


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SignalStop(0)


def exit_cleanly_on_signals() -> None:
    """Turn SIGTERM and SIGHUP (``timeout``, a closed terminal, CI) into SystemExit, so ``finally`` blocks and
    atexit stop the stack; by default those signals end Python at once and leave every child running. SIGINT
    raises KeyboardInterrupt even when the launching shell ignored it (a job started with ``&`` inherits that)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.stack", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--stack-file", type=Path, default=STACK_FILE, help="where to write the URLs and pids")
    args = parser.parse_args(argv)
    if args.command == "down":
        stop_stack(args.stack_file)
        return 0
    exit_cleanly_on_signals()
    try:
        with running(stack_file=args.stack_file, **for_people()) as stack:
            print(json.dumps({k: v for k, v in stack.info().items() if k != "env"}, indent=2))
            print(f"stack is up; logs in {stack.logs_dir}; Ctrl-C stops it", flush=True)
            print(f"the workspace: {stack.url('fake_slack')}/  (or `make chat` in another terminal)", flush=True)
            while all(proc.alive() for proc in stack.procs.values()):
                time.sleep(0.5)
            dead = [name for name, proc in stack.procs.items() if not proc.alive()]
            print(f"stopping: {', '.join(dead)} exited", file=sys.stderr)
            return 1
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, SignalStop):
        print("The local stack is stopped.", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())

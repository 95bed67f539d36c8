"""Child processes of the local stack: each in its own process group, stopped by its own pid.

A server started here may spawn children of its own (gcloud starts a JVM,
gunicorn forks a worker), so every process gets a new session and is stopped
by signalling its whole group: nothing is ever killed by name.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ops.local_stack import alive


class StackError(RuntimeError):
    """A piece of the local stack is missing or did not come up; the message says which and what to do."""


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reserved_port() -> socket.socket:
    """A socket bound to a free loopback port, held until the process that will serve on it starts: while it is
    held, no other process's bind and no outgoing connection gets that port (the Firestore emulator binds random
    ports of its own as it starts, and a stack picks its ports up front)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class Proc:
    """One running child, its log file, and how to stop it."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str]
    cwd: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                list(self.argv),
                cwd=self.cwd,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``timeout``."""
        stop_all([self], timeout)

    def kill(self) -> None:
        """SIGKILL the whole group at once: a crash, not a shutdown."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
            self.popen = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def group_alive(pgid: int) -> bool:
    """Whether the process group ``pgid`` still has a member."""
    return alive(pgid, group=True)


def stop_all(procs: Sequence[Proc], timeout: float = 10.0) -> None:
    """Stop these processes' groups together (see ``stop_groups``), then reap their leaders."""
    started = [p for p in procs if p.popen is not None]
    stop_groups({p.pid: p.popen.poll for p in started if p.popen is not None}, timeout=timeout)
    for proc in started:
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
            proc.popen = None


def stop_group(pgid: int, *, timeout: float = 10.0, reap: Callable[[], object] | None = None) -> None:
    """Stop the process group led by ``pgid``: SIGTERM, a grace period, then SIGKILL.

    ``reap`` (the leader's ``Popen.poll``) collects the leader once it exits, so
    a zombie leader does not keep the group looking alive.
    """
    stop_groups({pgid: reap}, timeout=timeout)


def stop_groups(groups: Mapping[int, Callable[[], object] | None], *, timeout: float = 10.0) -> None:
    """Stop several process groups at once (``pgid`` → its leader's ``reap``): SIGTERM to all, one grace period
    for all, then SIGKILL to what is left, so stopping a whole stack takes one grace period, not one each."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    left = _wait_groups(groups, timeout)
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously; give the kernel (and init, for orphans) a moment to clear the groups.
    _wait_groups({pgid: groups[pgid] for pgid in left}, 5)


def _wait_groups(groups: Mapping[int, Callable[[], object] | None], timeout: float) -> list[int]:
    """Wait up to ``timeout`` for the groups to end; the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        for reap in groups.values():
            if reap is not None:
                reap()
        alive = [pgid for pgid in groups if group_alive(pgid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def wait_until(check: Callable[[], bool], *, proc: Proc, what: str, timeout: float) -> None:
    """Poll ``check`` until it is true; fail early, with the log tail, if ``proc`` dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StackError(f"{proc.name} exited while starting ({what}). Log {proc.log_path}:\n{proc.log_tail()}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise StackError(
        f"{proc.name} was not ready after {timeout:.0f}s ({what}). Log {proc.log_path}:\n{proc.log_tail()}"
    )


def http_answers(url: str) -> bool:
    """True once something answers HTTP at ``url``, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - loopback URL built by the stack
            return True
    except urllib.error.HTTPError:
        return True


def spawn_ready(
    argv: Sequence[str], *, log_path: Path, prefix: str, cwd: Path, env: Mapping[str, str] | None = None,
    timeout: float = 20.0,
) -> tuple[subprocess.Popen[str], str]:  # fmt: skip
    """Start a fake (``python -m infra.fakes.<name> --port 0 ...``) in a process group of its own, its stderr in
    ``log_path``, and read the ready line it prints once it serves (``infra/fakes/serve.py``): the process and the
    rest of that line after ``prefix`` (its URL). Stopped, with the log's tail in the error, if it does not say it
    is ready within ``timeout``. Stop it with ``stop_group(proc.pid, reap=proc.poll)``."""
    with log_path.open("a") as log:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith(prefix):
        stop_group(proc.pid, timeout=5, reap=proc.poll)
        proc.stdout.close()
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise StackError(f"{argv[2] if len(argv) > 2 else argv[0]} did not start: {line!r}. Log {log_path}:\n{tail}")
    return proc, line[len(prefix) :].strip()

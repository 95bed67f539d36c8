"""``make dev``'s guard: whatever is killed, even with ``kill -9``, the terminal gets its settings back and the
stack stops.

The chat reads lines with readline, which turns the terminal's echo off while it waits; a process killed with
SIGKILL cannot turn it back on, and cannot stop its stack. So ``make dev`` forks: the child does the work, and
the parent only waits for it. If the child is killed, the parent restores the terminal settings it saved at
the start and stops, by pid, what the child's stack left running. If the parent (or ``make`` above it) is
killed, the kernel sends the child SIGTERM (``PR_SET_PDEATHSIG``), and it stops as it does on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import termios
from pathlib import Path
from types import FrameType
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _terminate_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent dies (Linux only; elsewhere nothing happens)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def guarded(stack_file: Path) -> None:
    """Return in a child process that does the work; this process waits for it, then exits with its status."""
    if not sys.platform.startswith("linux"):
        return
    saved = termios.tcgetattr(0) if os.isatty(0) else None
    parent = os.getpid()
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        _terminate_with_parent()
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)
        return
    _terminate_with_parent()  # make (our parent) killed: pass it on to the child, below
    os._exit(_wait(child, saved, stack_file))


def _wait(child: int, saved: list[Any] | None, stack_file: Path) -> int:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the child too: it stops the stack itself
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # restoring the terminal from the background must not stop us
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    _, status = os.waitpid(child, 0)
    if saved is not None:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(0, termios.TCSANOW, saved)
    if os.WIFSIGNALED(status):
        from infra.stack import stop_leftovers

        print(f"\nmake dev was killed ({signal.Signals(os.WTERMSIG(status)).name}).", file=sys.stderr, flush=True)
        stop_leftovers(stack_file)
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)

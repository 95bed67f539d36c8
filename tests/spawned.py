"""A fake started in its own process for a test that drives it alone (``python -m infra.fakes.<name>`` on a free
port, its URL read from its ready line), and stopped by its process group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra.procs import spawn_ready, stop_group

REPO = Path(__file__).resolve().parents[1]


def spawn_fake(name: str, ready_prefix: str, log_path: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``infra.fakes.<name>`` with ``flags``: its process and its URL once it says it is ready."""
    argv = [sys.executable, "-m", f"infra.fakes.{name}", "--host", "127.0.0.1", "--port", "0", *flags]
    return spawn_ready(argv, log_path=log_path, prefix=ready_prefix, cwd=REPO)


def stop_fake(proc: subprocess.Popen[str]) -> int:
    """SIGTERM its own process group (by its pid), SIGKILL only if it ignores that; its exit status."""
    stop_group(proc.pid, reap=proc.poll)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.wait(timeout=60)

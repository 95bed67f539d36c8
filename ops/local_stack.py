"""The local stack an operator tool is pointed at: the record a running ``make stack`` / ``make dev`` keeps in
``.local/stack.json`` (its pieces' URLs, pids and environment), read only while the run that wrote it is alive.

``infra/stack.py`` writes that record and uses these checks too; this side only reads, so the operator tools
(``admin.py``: ``make sweep`` runs on the local stack) never import the local-stack folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STACK_FILE = ROOT / ".local" / "stack.json"


def alive(pid: int, *, group: bool = False) -> bool:
    """Whether a process ``pid`` (with ``group``, a process group) exists; one we may not signal counts."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started_here(pid: int) -> bool:
    """Guard against a recycled pid: the process must run from this checkout."""
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(ROOT)
    except OSError:
        return False


def live_owner(stack_file: Path) -> tuple[dict[str, Any], int | None]:
    """What ``stack_file`` records, and the pid of the run that owns it if that run is still alive."""
    try:
        info: dict[str, Any] = json.loads(stack_file.read_text())
    except (FileNotFoundError, ValueError):
        return {}, None
    owner = info.get("owner")
    living = isinstance(owner, int) and owner != os.getpid() and alive(owner) and started_here(owner)
    return info, owner if living else None


def live_stack(stack_file: Path = STACK_FILE) -> dict[str, Any]:
    """What ``stack_file`` records if the run that wrote it is still alive; empty when no local stack runs."""
    info, owner = live_owner(stack_file)
    return info if owner is not None else {}

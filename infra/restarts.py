"""Restarting the local stack's emulators mid-run (the fault run's infrastructure faults), on the same ports.

Firestore keeps its data across the restart, as the real service never loses a committed write: the functions
(the only processes that write) are frozen with SIGSTOP for a moment, so every commit already sent is applied and
nothing new arrives; the emulator's own export endpoint (``/emulator/v1/projects/{project}:export``, what
``--export-on-exit`` uses; gcloud's emulator does not export when it is signalled) writes the data to disk; the
emulator is killed; the functions run again, and every Firestore call they make fails with UNAVAILABLE until the
emulator is back on its port with ``--import-data``. A commit in flight when they were frozen either reached the
export or fails and is retried: no acknowledged write is lost.

The Cloud Tasks emulator keeps nothing (it is in memory), while Cloud Tasks never loses a task it accepted. So the
restart keeps them as the service would: with the functions (the only producers) frozen, the tasks the emulator
holds and has not yet handed to the dispatcher are listed, the emulator is killed, and once it is back (its queue
created again) they are created again under their own names. A task listed while it was being handed over is
delivered twice, which the product must (and does) treat as a duplicate delivery. Meanwhile every ``create_task``
fails with UNAVAILABLE, and the product must retry it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from infra.procs import Proc, StackError
from infra.stack import FUNCTIONS, PROJECT, QUEUE, Stack

DRAIN_SECONDS = 0.5  # after the writers are frozen: a commit already sent is applied and answered meanwhile


@contextlib.contextmanager
def frozen(procs: Sequence[Proc]) -> Iterator[None]:
    """SIGSTOP these processes' groups for the block, SIGCONT them after (also on an error)."""
    stopped: list[int] = []
    try:
        for proc in procs:
            if proc.alive():
                os.killpg(proc.pid, signal.SIGSTOP)
                stopped.append(proc.pid)
        yield
    finally:
        for pgid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)


def export_firestore(stack: Stack, directory: Path) -> Path:
    """Export the emulator's data into ``directory`` (new); the overall metadata file ``--import-data`` takes."""
    directory.mkdir(parents=True)
    body = {"database": f"projects/{PROJECT}/databases/(default)", "export_directory": str(directory)}
    request = urllib.request.Request(  # noqa: S310 - the stack's loopback emulator
        f"{stack.url('firestore')}/emulator/v1/projects/{PROJECT}:export",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60):  # noqa: S310
        pass
    found = sorted(directory.glob("*/*.overall_export_metadata"))
    if not found:
        raise StackError(f"the Firestore emulator's export wrote no metadata file under {directory}")
    return found[-1]


def restart_firestore(stack: Stack, *, down_seconds: float = 1.0) -> float:
    """Restart the Firestore emulator with its data (see the module's docstring), ``down_seconds`` at least between
    the kill and the new start; the seconds it was unreachable."""
    exports = stack.stack_file.parent / "firestore-exports"
    writers = [stack.procs[name] for name in FUNCTIONS if name in stack.procs]
    with frozen(writers):
        time.sleep(DRAIN_SECONDS)
        kept = export_firestore(stack, exports / f"{time.time_ns()}")
        stack.procs.pop("firestore").kill()
    down = time.monotonic()
    time.sleep(down_seconds)
    stack.firestore_import = kept
    stack.restart_emulator("firestore")
    for old in exports.iterdir():  # the emulator read its export as it started: earlier ones are not needed
        if old != kept.parent.parent:
            shutil.rmtree(old, ignore_errors=True)
    return time.monotonic() - down


def restart_tasks(stack: Stack, *, down_seconds: float = 1.0, stopped: threading.Event | None = None,
                  until: threading.Event | None = None) -> float:  # fmt: skip
    """Restart the Cloud Tasks emulator on its port with the tasks it had accepted (see the module's docstring);
    the seconds it was unreachable. ``stopped`` is set once it is down; it stays down ``down_seconds``, and until
    ``until`` is set if given (an outage during a request the caller makes meanwhile)."""
    from google.cloud import tasks_v2

    writers = [stack.procs[name] for name in FUNCTIONS if name in stack.procs]
    with frozen(writers):
        time.sleep(DRAIN_SECONDS)
        with tasks_client(stack) as client:
            request = tasks_v2.ListTasksRequest(parent=QUEUE, response_view=tasks_v2.Task.View.FULL)
            kept = list(client.list_tasks(request=request, timeout=10))
        stack.procs.pop("tasks").kill()
    down = time.monotonic()
    if stopped is not None:
        stopped.set()
    time.sleep(down_seconds)
    if until is not None:
        until.wait(120)
    stack.restart_emulator("tasks")
    unreachable = time.monotonic() - down
    with tasks_client(stack) as client:
        for task in kept:
            again = tasks_v2.Task(name=task.name, http_request=task.http_request, schedule_time=task.schedule_time,
                                  dispatch_deadline=task.dispatch_deadline)  # fmt: skip
            client.create_task(parent=QUEUE, task=again, timeout=10)
    return unreachable


@contextlib.contextmanager
def tasks_client(stack: Stack) -> Iterator[Any]:
    """A Cloud Tasks client on the stack's emulator, its channel closed afterwards."""
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    channel = grpc.insecure_channel(stack.tasks_host)
    try:
        yield tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
    finally:
        channel.close()

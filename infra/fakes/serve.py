"""The one serve loop every fake runs under ``python -m infra.fakes.<name>``: serve in a thread until SIGTERM or
SIGINT, then shut down cleanly.

The ready line goes to stdout only once the socket is bound, the server has started and the signal handlers are in
place, so whoever starts a fake (a test, the local stack, ``infra/procs.py``) can wait for that line, read the port
from it when port 0 was asked for, and stop it by its pid.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import IO, Any, Protocol, TypeVar

T = TypeVar("T")
MAX_BODY_BYTES = 32 * 1024 * 1024  # what a fake reads of one request at most
# The listen backlog of a fake's socket: socketserver's default of 5 let the kernel drop the connections a burst of
# clients opened at once beyond it (32 children of a tree calling the Gemini stub or the fake Slack together), and
# each dropped one waited for TCP's retransmission, a second, before it was accepted: a stall the services the
# fakes stand for (Google's and Slack's front ends) never make (issue 28.4).
LISTEN_BACKLOG = 128


class Servable(Protocol):
    """What the loop serves: a ``socketserver`` server, or ``UvicornServer`` for an ASGI app."""

    def serve_forever(self, poll_interval: float = ...) -> None: ...

    def shutdown(self) -> None: ...

    def server_close(self) -> None: ...


def arguments(prog: str, description: str, *, port: int | None = 0) -> argparse.ArgumentParser:
    """The command line every fake starts from: ``--host`` and ``--port`` (``port`` its default; None: required)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    where = "port to bind, 0 for any free one (the ready line names it)"
    if port is None:
        parser.add_argument("--port", type=int, required=True, help=where)
    else:
        parser.add_argument("--port", type=int, default=port, help=f"{where} (default: {port})")
    return parser


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """The dataclass ``cls`` built from the parsed arguments named as its fields (``given`` adds or overrides)."""
    names = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{**{name: value for name, value in vars(args).items() if name in names}, **given})


@contextlib.contextmanager
def in_thread(server: Servable, name: str) -> Iterator[None]:
    """Serve ``server`` in a daemon thread for the length of a ``with`` block, then shut it down and close it."""
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=name, daemon=True)
    worker.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        worker.join(timeout=5)


def serve(
    server: Servable, *, name: str, ready: str, started: Callable[[], None] | None = None,
    stopped: Callable[[], None] | None = None,
) -> int:  # fmt: skip
    """Serve ``server`` until SIGTERM or SIGINT; ``ready`` is printed once it serves (after ``started``, which may
    wait for it and log), ``stopped`` runs once it has shut down. The exit status (0)."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()  # shutdown() waits for serve_forever: the handler only flags, the loop below stops it

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        with in_thread(server, name):
            if started is not None:
                started()
            print(ready, flush=True)
            while not stop.wait(0.5):  # a timed wait lets the signal handler run promptly
                pass
    finally:
        if stopped is not None:
            stopped()
    return 0


class JsonLogServer(ThreadingHTTPServer):
    """A fake's threaded HTTP server: its ``url``, and a log of one JSON object per line (stderr unless
    ``log_stream``), each whole even when handler threads log at once, stamped with the time."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], log_stream: IO[str] | None = None
    ) -> None:
        self._log_stream = log_stream
        self._log_lock = threading.Lock()
        super().__init__(address, handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def log_json(self, line: dict[str, Any]) -> None:
        stream = self._log_stream or sys.stderr
        with self._log_lock:
            stream.write(json.dumps({"ts": round(time.time(), 3), **line}, ensure_ascii=False) + "\n")
            stream.flush()


BROWSER_REFUSED = "a browser's request: this fake answers the product, the tests and local tools only"


def from_a_browser(handler: BaseHTTPRequestHandler) -> bool:
    """True for a request a browser sent (it names its page's Origin on every POST; a program sends none). A fake
    acts for whoever calls it (it scripts the model, delivers tasks): a page on any site could otherwise post to
    its loopback port while ``make dev`` runs (a form or a no-cors fetch needs no preflight)."""
    return handler.headers.get("Origin") is not None


def read_body(handler: BaseHTTPRequestHandler, limit: int = MAX_BODY_BYTES) -> bytes:
    """A request's body; a ``ValueError`` when its Content-Length is not a number from 0 to ``limit``."""
    length = int(handler.headers.get("Content-Length") or 0)
    if length < 0 or length > limit:
        raise ValueError(f"body length {length} out of range")
    return handler.rfile.read(length)


class UvicornServer:
    """An ASGI app under uvicorn, served by the same loop (uvicorn installs no signal handlers off the main
    thread: the loop's are the ones that count)."""

    def __init__(self, app: Any, *, host: str, port: int) -> None:
        import uvicorn  # only the MCP fake needs it

        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self.url = f"http://{host}:{port}"

    def serve_forever(self, poll_interval: float = 0.1) -> None:
        self.server.run()

    def wait_started(self, timeout: float = 30.0) -> None:
        """Block until uvicorn has bound its socket and started the app."""
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the server at {self.url} did not start in {timeout:g}s")
            time.sleep(0.05)

    def shutdown(self) -> None:
        self.server.should_exit = True

    def server_close(self) -> None:
        """Nothing: uvicorn closes its sockets as it exits."""

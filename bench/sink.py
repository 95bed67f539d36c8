"""A no-op HTTP endpoint that answers 200 to everything and counts what it got.

The benchmark stack points ``TASKS_TARGET_URL`` here, so the Cloud Tasks emulator
delivers each task the ingress creates to something that returns at once,
instead of starting an agent session that would load the machine during a
latency measurement. ``python -m bench.sink --port N`` runs it as its own
process; ``Sink`` runs it on a thread (the budget test does).
"""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.command == "GET" and self.path == "/_count":
            body = str(self.server.count).encode()
        else:
            with self.server.lock:
                self.server.count += 1
            body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer  # http.server's naming

    def log_message(self, format: str, *args: Any) -> None:  # the base class's signature
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.count = 0
        self.lock = threading.Lock()


class Sink:
    """The sink on a background thread of this process, on a free loopback port."""

    def __init__(self) -> None:
        self.server = _Server(0)
        self.thread = threading.Thread(target=self.server.serve_forever, name="task-sink", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    @property
    def count(self) -> int:
        return self.server.count

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    server = _Server(parser.parse_args().port)
    server.serve_forever()


if __name__ == "__main__":
    main()

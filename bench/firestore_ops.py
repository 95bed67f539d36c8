"""Counting Firestore reads, writes and queries at the gRPC layer of the real client.

A client interceptor sees every RPC the google-cloud-firestore client sends and
classifies it the way Firestore bills it:

- ``GetDocument`` and ``BatchGetDocuments``: one read per document asked for
  (found or missing; Firestore bills a lookup of a missing document too);
- ``RunQuery``: one query, and one read per document returned, or one read for
  an empty result (Firestore's minimum charge for a query);
- ``Commit`` and ``BatchWrite``: one write per write in the request (a field
  transform such as ``Increment`` rides on its write and costs nothing extra);
  the serialized size of the request is summed as ``write_bytes``;
- ``BeginTransaction`` and ``Rollback``: counted, not billed; a ``BeginTransaction`` that names the transaction it
  retries (the client runs a transaction again after an aborted commit, reading again) counts as a retry too.

``CountingClient`` is a ``firestore.Client`` whose channel to the emulator goes
through the interceptor; hand it in with ``shared.deps.override(firestore=...)`` and every query
the product runs is counted without changing a line of it.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud import firestore

_PREFIX = "/google.firestore.v1.Firestore/"


@dataclass(frozen=True)
class Ops:
    """What a piece of work cost in Firestore operations."""

    reads: int = 0
    writes: int = 0
    queries: int = 0
    transactions: int = 0
    rollbacks: int = 0
    retries: int = 0  # transactions begun again after an aborted commit (their reads counted again)
    rpcs: int = 0
    write_bytes: int = 0
    # The RPCs in order, e.g. ``BatchGetDocuments 1r``; kept by sums, dropped by differences.
    trace: tuple[str, ...] = field(default=(), compare=False)

    def __sub__(self, other: Ops) -> Ops:
        return Ops(**{name: getattr(self, name) - getattr(other, name) for name in _COUNTS})

    def __add__(self, other: Ops) -> Ops:
        sums = {name: getattr(self, name) + getattr(other, name) for name in _COUNTS}
        return Ops(**sums, trace=self.trace + other.trace)

    def billed(self) -> dict[str, int]:
        """The three figures the budget holds."""
        return {"reads": self.reads, "writes": self.writes, "queries": self.queries}


_COUNTS = ("reads", "writes", "queries", "transactions", "rollbacks", "retries", "rpcs", "write_bytes")


@dataclass
class Commit:
    """One Commit RPC as seen on the wire: when it was sent, how many writes, how many bytes."""

    at: float
    writes: int
    size: int


@dataclass
class OpCounter(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """A gRPC client interceptor that counts Firestore operations; thread-safe."""

    counts: Counter[str] = field(default_factory=Counter)
    methods: Counter[str] = field(default_factory=Counter)
    commits: list[Commit] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- reading the counts ------------------------------------------------------------------
    def snapshot(self) -> Ops:
        with self.lock:
            return Ops(**{name: self.counts[name] for name in _COUNTS}, trace=tuple(self.trace))

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.methods.clear()
            self.commits.clear()
            self.trace.clear()

    def measure(self, work: Callable[[], object]) -> Ops:
        """The operations ``work()`` caused (nothing else may use the client meanwhile), with their trace."""
        before = self.snapshot()
        work()
        after = self.snapshot()
        return Ops(
            **{name: getattr(after, name) - getattr(before, name) for name in _COUNTS},
            trace=after.trace[len(before.trace) :],
        )

    # --- the interceptor ---------------------------------------------------------------------
    def _add(self, **amounts: int) -> None:
        with self.lock:
            self.counts.update(amounts)

    def _note(self, entry: str) -> int:
        """Append ``entry`` to the trace; returns its index, for a stream to complete it later."""
        with self.lock:
            self.trace.append(entry)
            return len(self.trace) - 1

    def _retrace(self, index: int, entry: str) -> None:
        with self.lock:
            self.trace[index] = entry

    def _counted(self, details: grpc.ClientCallDetails) -> str:
        """The called RPC's method, counted."""
        method = _method(details)
        with self.lock:
            self.methods[method] += 1
            self.counts["rpcs"] += 1
        return method

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        method = self._counted(details)
        if method in {"Commit", "BatchWrite"}:
            size = _size(request)
            writes = len(request.writes)
            self._add(writes=writes, write_bytes=size)
            self._note(f"{method} {writes}w")
            with self.lock:
                self.commits.append(Commit(time.perf_counter(), writes, size))
        elif method == "GetDocument":
            self._add(reads=1)
            self._note(f"{method} 1r")
        elif method == "BeginTransaction":
            retried = bool(request.options.read_write.retry_transaction)
            self._add(transactions=1, retries=int(retried))
            self._note(method)
        elif method == "Rollback":
            self._add(rollbacks=1)
            self._note(method)
        else:
            self._note(method)
        return continuation(details, request)

    def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        method = self._counted(details)
        call = continuation(details, request)
        if method == "BatchGetDocuments":
            self._add(reads=len(request.documents))
            self._note(f"{method} {len(request.documents)}r")
            return call
        if method in {"RunQuery", "RunAggregationQuery"}:
            self._add(queries=1)
            index = self._note(method)
            return _CountedStream(call, self, index, count_documents=method == "RunQuery")
        self._note(method)
        return call


class _CountedStream:
    """A streaming call that counts the documents it yields, and bills an empty result as one read."""

    def __init__(self, call: Any, counter: OpCounter, index: int, *, count_documents: bool) -> None:
        self._call = call
        self._add = counter._add
        self._retrace = counter._retrace
        self._index = index
        self._count_documents = count_documents
        self._name = "RunQuery" if count_documents else "RunAggregationQuery"
        self._documents = 0
        self._billed = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            response = next(self._call)
        except StopIteration:
            self._bill()
            raise
        if ("document" if self._count_documents else "result") in response:
            # (an aggregation bills per batch of index entries; one read per result is its minimum)
            self._documents += 1
            self._add(reads=1)
            self._retrace(self._index, f"{self._name} {self._documents}r")
        return response

    def _bill(self) -> None:
        if not self._billed:
            self._billed = True
            if self._documents == 0:
                self._add(reads=1)
            self._retrace(self._index, f"{self._name} {max(1, self._documents)}r")

    def __getattr__(self, name: str) -> Any:  # the rest of grpc.Call: code(), cancel(), trailing_metadata()...
        return getattr(self._call, name)


def _method(details: grpc.ClientCallDetails) -> str:
    name = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
    return name.removeprefix(_PREFIX)


def _size(request: Any) -> int:
    """The serialized size of a request, proto-plus or raw protobuf."""
    serialize = getattr(type(request), "serialize", None)
    if serialize is not None:
        return len(serialize(request))
    return int(request.ByteSize())


class CountingClient(firestore.Client):
    """A Firestore client whose every RPC to the emulator goes through ``counter``."""

    def __init__(self, *, counter: OpCounter, project: str, database: str = "(default)") -> None:
        super().__init__(project=project, database=database)
        if self._emulator_host is None:
            raise RuntimeError("CountingClient counts against the emulator only: set FIRESTORE_EMULATOR_HOST")
        self.counter = counter

    def _emulator_channel(self, transport: Any) -> grpc.Channel:
        channel = super()._emulator_channel(transport)  # type: ignore[no-untyped-call]
        return grpc.intercept_channel(channel, self.counter)


def wipe(emulator_host: str, project: str, database: str) -> None:
    """Delete every document of one database on the Firestore emulator (its reset endpoint)."""
    url = f"http://{emulator_host}/emulator/v1/projects/{project}/databases/{database}/documents"
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=300):
        pass

"""Figure 4's 150,000 documents, built once and kept as the commits that write them.

Building the documents (the product's models' ``to_doc``, then each field as a Firestore ``Value``) takes as much of
the machine as writing them; so the first run keeps every commit request it sends, serialised, in
``.local/cache/scale-{key}/``, and later runs send those bytes as they are, on a raw gRPC channel, eight commits at a
time. The key is a hash of what makes the documents (the generators' code and parameters, and a sample of the
documents they make with the product's models as they are), so a change to any of them builds the commits again, and
the cache that run keeps replaces the old one. The documents' times are those of the run that built them (``at``,
kept beside them): the figure measures against that time.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import grpc
from google.cloud.firestore_v1.types import firestore as fpb

from infra.stack import LOCAL

CACHE = LOCAL / "cache"
META = "kept.json"
COMMIT = "/google.firestore.v1.Firestore/Commit"
PARALLEL = 8  # commits in flight
_LENGTH = struct.Struct(">I")
_COMMIT_REQUEST = fpb.CommitRequest.pb()


@dataclass(frozen=True)
class Kept:
    """The commits kept for a key, and the time their documents were made for."""

    directory: Path
    at: datetime


def key(parts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def directory(data_key: str) -> Path:
    return CACHE / f"scale-{data_key}"


def find(data_key: str) -> Kept | None:
    """The commits kept for ``data_key``, if a run built them."""
    try:
        meta = json.loads((directory(data_key) / META).read_text())
        return Kept(directory(data_key), datetime.fromisoformat(meta["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _send(host: str, requests: Iterator[bytes]) -> None:
    """Each serialised commit request sent to the emulator at ``host``, ``PARALLEL`` at a time, as the client sends
    them to the emulator (its ``Bearer owner``)."""
    channel = grpc.insecure_channel(host)
    try:
        commit = channel.unary_unary(COMMIT)  # bytes in, bytes out
        in_flight = threading.BoundedSemaphore(2 * PARALLEL)  # read from the file as they go, not all at once

        def send(request: bytes) -> None:
            try:
                commit(request, metadata=[("authorization", "Bearer owner")], timeout=300)
            finally:
                in_flight.release()

        with ThreadPoolExecutor(PARALLEL) as pool:
            sent = []
            for request in requests:
                in_flight.acquire()
                sent.append(pool.submit(send, request))
            for future in sent:
                future.result()
    finally:
        channel.close()


def _read(path: Path) -> Iterator[bytes]:
    with path.open("rb") as kept:
        yield from _requests(kept)


def _requests(kept: BinaryIO) -> Iterator[bytes]:
    """The serialised requests of a ``.commits`` file: each one its length (4 bytes, big-endian), then itself."""
    while header := kept.read(_LENGTH.size):
        yield kept.read(_LENGTH.unpack(header)[0])


def load(kept: Kept, host: str, database: str) -> float:
    """The kept commits of ``database`` sent to the emulator at ``host``; the seconds it took."""
    started = time.perf_counter()
    _send(host, _read(kept.directory / f"{database}.commits"))
    return time.perf_counter() - started


def build(data_key: str, host: str, database: str, path: str, writes: Iterator[list[Any]]) -> float:
    """Commit ``writes`` (lists of ``Write`` messages) to ``database`` (its resource name ``path``) on the emulator at
    ``host``, keeping each commit request for ``data_key``; the seconds it took. ``finish`` makes the kept commits the
    ones found."""
    target = directory(data_key)
    target.mkdir(parents=True, exist_ok=True)
    (target / META).unlink(missing_ok=True)  # found only once every database's commits are kept
    started = time.perf_counter()
    with (target / f"{database}.commits").open("wb") as out:
        _send(host, _keeping(out, path, writes))
    return time.perf_counter() - started


def _keeping(out: BinaryIO, path: str, writes: Iterator[list[Any]]) -> Iterator[bytes]:
    for chunk in writes:
        request = _COMMIT_REQUEST(database=path, writes=chunk).SerializeToString()
        out.write(_LENGTH.pack(len(request)))
        out.write(request)
        yield request


def finish(data_key: str, *, at: datetime) -> None:
    """The commits built for ``data_key`` are complete: found from now on; every other key's are removed."""
    target = directory(data_key)
    (target / META).write_text(json.dumps({"at": at.isoformat()}))
    for old in CACHE.glob("scale-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)

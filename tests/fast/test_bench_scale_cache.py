"""Figure 4's kept commits (``bench/scale_cache.py``): found only once complete, read back byte for byte, keyed by
what makes the documents."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.cloud.firestore_v1.types import firestore as fpb

from bench import scale, scale_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(scale_cache, "CACHE", tmp_path)
    return tmp_path


def test_the_kept_requests_read_back_as_sent_and_are_the_commits_of_the_documents() -> None:
    database = "projects/p/databases/lookup-1200"
    chunks = list(scale.commits(database, scale.lookup_docs(1200, datetime(2026, 1, 1, tzinfo=UTC))))
    assert [len(chunk) for chunk in chunks] == [500, 500, 201]  # the 1,200 questions and the target's thread
    out = io.BytesIO()
    sent = list(scale_cache._keeping(out, database, iter(chunks)))
    assert list(scale_cache._requests(io.BytesIO(out.getvalue()))) == sent
    first = fpb.CommitRequest.deserialize(sent[0])
    assert first.database == database
    assert first.writes[0].update.name == f"{database}/documents/questions/q-0"


def test_commits_are_found_only_once_finished_and_replace_other_keys(cache: Path) -> None:
    at = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    old = scale_cache.directory("old")
    old.mkdir(parents=True)
    (old / scale_cache.META).write_text('{"at": "2026-01-01T00:00:00+00:00"}')
    new = scale_cache.directory("new")
    new.mkdir()
    (new / "lookup-100.commits").write_bytes(b"")
    assert scale_cache.find("new") is None  # built, not finished: a run killed while it built
    scale_cache.finish("new", at=at)
    found = scale_cache.find("new")
    assert found is not None
    assert (found.at, found.directory) == (at, new)
    assert not old.exists()


def test_the_key_follows_what_makes_the_documents() -> None:
    assert scale.data_key() == scale.data_key()  # nothing random or timed in the documents it samples
    assert scale_cache.key(["a", "b"]) != scale_cache.key(["a", "c"])
    assert scale_cache.key(["ab", ""]) != scale_cache.key(["a", "b"])

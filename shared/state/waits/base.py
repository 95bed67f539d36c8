"""What every kind of wait tells the state layer (issue 23): where the thing a call waits on is stored, and whether
it is resolved, read in a resolution's transaction. One module per kind implements it; ``shared.state.waits``
holds them by ``WaitKind``."""

from __future__ import annotations

from typing import Any, Protocol

from google.cloud import firestore

from shared.state.models import Waiting, WaitKind


class StoredWait(Protocol):
    """One kind of wait's stored side."""

    @property
    def kind(self) -> WaitKind: ...

    def ref(self, entry: Waiting) -> firestore.DocumentReference | None:
        """The document whose ``status`` says whether ``entry`` is resolved (None: nothing is read, the asker's own
        document says)."""
        ...

    def resolved(self, entry: Waiting, found: dict[str, Any] | None, asker: dict[str, Any]) -> bool:
        """Whether ``entry`` (not released) is resolved: ``found`` is its document's fields as read (None: missing,
        or nothing read), ``asker`` the waiting session's document."""
        ...

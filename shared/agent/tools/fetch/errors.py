"""The fetcher's errors: their messages go back to the model as the tool's error."""

from __future__ import annotations

from shared.errors import ProductError, Refused


class FetchError(ProductError):
    """The URL could not be fetched; the message is meant for the model."""


class FetchRefused(FetchError, Refused):
    """The URL points somewhere the fetcher will not go."""

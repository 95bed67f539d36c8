"""The fetcher's errors: their messages go back to the model as the tool's error."""

from __future__ import annotations


class FetchError(Exception):
    """The URL could not be fetched; the message is meant for the model."""


class FetchRefused(FetchError):
    """The URL points somewhere the fetcher will not go."""

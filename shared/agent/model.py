"""The Gemini client and one model turn, with google-genai's own retry and function declarations.

google-genai reads its own variables: ``GOOGLE_GENAI_USE_VERTEXAI`` selects
Vertex AI with the function's identity (and ``GOOGLE_CLOUD_PROJECT`` /
``GOOGLE_CLOUD_LOCATION``), otherwise ``GEMINI_API_KEY`` is used, and
``GOOGLE_GEMINI_BASE_URL`` points it at the local stub. Only this module and
the agent import google-genai; the Slack ingress never does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pydantic
from google import genai
from google.genai import errors, types

from shared import config, deps
from shared.errors import ProductError, Unavailable

# Statuses worth retrying: throttling, timeouts and server-side failures.
RETRY_STATUSES = [408, 429, 500, 502, 503, 504]


class ModelUnavailable(Unavailable):
    """The model kept failing after the SDK's retries (an outage, or throttling that did not clear)."""


class ContextTooLong(ProductError):
    """The model rejected the request as longer than its context window."""


class MalformedResponse(ProductError):
    """The model's reply could not be read (for example function-call arguments that are not an object)."""


class StreamUnsupported(ProductError):
    """The model's endpoint does not offer the streaming call (it answered 404, 405 or 501 before any text)."""


# What an endpoint without ``streamGenerateContent`` answers: the turn is asked again whole.
NO_STREAM_STATUSES = (404, 405, 501)


def client() -> genai.Client:
    """The google-genai client, built on first use (kept in ``shared.deps``), with bounded retries and a timeout."""
    return deps.once("model", _build)


def _build() -> genai.Client:
    settings = config.settings()
    return genai.Client(
        http_options=types.HttpOptions(
            timeout=settings.model_timeout_seconds * 1000,
            retry_options=types.HttpRetryOptions(
                attempts=settings.model_retry_attempts,
                initial_delay=1.0,
                max_delay=8.0,
                http_status_codes=RETRY_STATUSES,
            ),
        )
    )


def generate(
    contents: Sequence[types.Content],
    *,
    system: str,
    tools: Sequence[types.FunctionDeclaration] = (),
) -> types.GenerateContentResponse:
    """One model turn, whole."""
    with _translated():
        return client().models.generate_content(
            model=config.settings().gemini_model, contents=list(contents), config=_config(system, tools)
        )


def generate_stream(
    contents: Sequence[types.Content],
    *,
    system: str,
    tools: Sequence[types.FunctionDeclaration] = (),
    on_text: Callable[[str], None],
) -> types.GenerateContentResponse:
    """One model turn over google-genai's streaming call: ``on_text`` gets each piece of answer text as it arrives
    (thoughts are not shown); returns the whole turn as ``generate`` would, its text parts joined."""
    parts: list[types.Part] = []
    last: types.GenerateContentResponse | None = None
    with _translated(), _unsupported_stream():
        for chunk in client().models.generate_content_stream(
            model=config.settings().gemini_model, contents=list(contents), config=_config(system, tools)
        ):
            last = chunk
            content = chunk.candidates[0].content if chunk.candidates else None
            for part in (content.parts if content else None) or []:
                if part.text and not part.thought and not part.function_call:
                    on_text(part.text)
                parts.append(part)
    whole = types.Content(role="model", parts=_joined(parts))
    finish = last.candidates[0].finish_reason if last is not None and last.candidates else None
    return types.GenerateContentResponse(
        candidates=[types.Candidate(content=whole, finish_reason=finish)],
        usage_metadata=last.usage_metadata if last is not None else None,
    )


def _joined(parts: list[types.Part]) -> list[types.Part]:
    """Adjacent text pieces of a stream as one part (thoughts apart; a signature stays with its first piece)."""
    out: list[types.Part] = []
    for part in parts:
        before = out[-1] if out else None
        if (before is not None and part.text is not None and before.text is not None and not part.function_call
                and bool(part.thought) == bool(before.thought) and not part.thought_signature):  # fmt: skip
            out[-1] = before.model_copy(update={"text": before.text + part.text})
        else:
            out.append(part)
    return out


def _config(system: str, tools: Sequence[types.FunctionDeclaration]) -> types.GenerateContentConfig:
    """Automatic function calling is off because the product runs its own loop."""
    return types.GenerateContentConfig(
        system_instruction=system,
        tools=[types.Tool(function_declarations=list(tools))] if tools else None,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        temperature=0.2,
    )


@contextmanager
def _unsupported_stream() -> Iterator[None]:
    """An endpoint that does not stream (it answers before the first chunk) as ``StreamUnsupported``."""
    try:
        yield
    except errors.APIError as exc:
        if exc.code in NO_STREAM_STATUSES:
            raise StreamUnsupported(f"{exc.code} {exc.status}: {exc.message}") from exc
        raise


@contextmanager
def _translated() -> Iterator[None]:
    """google-genai's and httpx's failures as the product's: too long, unavailable, malformed."""
    try:
        yield
    except errors.ClientError as exc:
        if exc.code == 400 and _is_too_long(exc):
            raise ContextTooLong(str(exc.message)) from exc
        if exc.code in RETRY_STATUSES:
            raise ModelUnavailable(f"{exc.code} {exc.status}: {exc.message}") from exc
        raise
    except errors.ServerError as exc:
        raise ModelUnavailable(f"{exc.code} {exc.status}: {exc.message}") from exc
    except errors.APIError:
        raise
    except pydantic.ValidationError as exc:
        raise MalformedResponse(_first_error(exc)) from exc
    except Exception as exc:  # httpx timeouts and connection errors, after the SDK's retries
        if type(exc).__module__.startswith(("httpx", "httpcore")):
            raise ModelUnavailable(f"{type(exc).__name__}: {exc}") from exc
        raise


TOKEN_KINDS = ("prompt", "cached", "output", "thinking")


def usage(response: types.GenerateContentResponse) -> dict[str, int]:
    """What one model turn cost, from the response's ``usage_metadata``: prompt (cached among them), output and
    thinking tokens. A count is what the endpoint says, never below zero: a negative one would take a person's day
    back (a turn costs nothing less than nothing)."""
    meta = response.usage_metadata
    if meta is None:
        return dict.fromkeys(TOKEN_KINDS, 0)
    return {
        "prompt": tokens(meta.prompt_token_count),
        "cached": tokens(meta.cached_content_token_count),
        "output": tokens(meta.candidates_token_count),
        "thinking": tokens(meta.thoughts_token_count),
    }


def tokens(count: int | None) -> int:
    """A reported token count, clamped at zero."""
    return max(0, int(count or 0))


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def _is_too_long(exc: errors.ClientError) -> bool:
    text = f"{exc.message} {json.dumps(exc.details, default=str)}".lower()
    return "token" in text and ("exceed" in text or "too long" in text or "maximum" in text)


def estimate_tokens(contents: Sequence[types.Content]) -> int:
    """A cheap size estimate (about four characters a token), to shorten before the model has to refuse."""
    return sum(len(content.model_dump_json(exclude_none=True)) for content in contents) // 4

"""The JSON Schemas a server declares for its tools, compiled once per instance rather than once per call.

Every session's toolset checks the input schemas of the cached listing (``catalog``), and every call checks its
arguments against the tool's input schema and its structured result against the output schema. Compiling a schema
(its validator class, a validator bound to a registry of the schema alone, and for a checked schema the check
against its metaschema) costs many times what validating one call's data does, as the SDK's own ``ClientSession``
notes where it caches compiled output schemas per session; a session here is one call, so the compiled validators
are kept for the instance, keyed by the schema's content, its keys' order included (a listing that changes a schema
gets a validator of its own, and errors come in the order they did). A validator is immutable, so threads share it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
from jsonschema.protocols import Validator
from referencing import Registry

KEPT = 256  # schemas compiled and kept; a server with more tools than this compiles the others again
# A schema longer than this (as JSON) is compiled at every use, never kept: a kept one of that size holds about
# 0.2 MB compiled, so the cache stays under about 50 MB whatever a server lists.
KEPT_CHARS = 16_384


def validator(schema: dict[str, Any], *, checked: bool = False) -> Validator:
    """A validator for ``schema`` whose ``$ref`` resolves within the schema only (jsonschema would otherwise
    fetch any URL a server names). ``checked``: the schema is first checked against its metaschema (a
    ``jsonschema.SchemaError`` if it is not a valid schema)."""
    text = json.dumps(schema)
    compiled = _compiled(text, checked) if len(text) <= KEPT_CHARS else _compiled.__wrapped__(text, checked)
    if isinstance(compiled, str):
        raise jsonschema.SchemaError(compiled)
    return compiled


@functools.lru_cache(maxsize=KEPT)
def _compiled(text: str, checked: bool) -> Validator | str:
    """The validator, or why the schema is not valid (kept too: such a tool is refused at every call, as before)."""
    schema = json.loads(text)  # the validator's own copy: nothing a caller does to its dict reaches it
    cls = jsonschema.validators.validator_for(schema)
    if checked:
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            return str(exc.message)
    built: Validator = cls(schema, registry=Registry())
    return built

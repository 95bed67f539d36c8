"""The Edit modal of an approval card: one input per argument, built from the tool's JSON Schema, and the parse of
a submission back into arguments, checked against that schema.

A string is a text input (a select when the schema lists its values), an integer or number a number input, a
boolean a true/false select; anything a field cannot express (objects, arrays, a value of no declared type,
arguments the schema does not name) is a JSON text area, and so is a value its own field would not show as it is
(``null``, a value of another type or one its enum does not list, a string with a character a text field would
hide, shown as an escape as the card shows it): submitted unchanged, the modal gives back every
argument as the call has it. Pure: no Slack call, no store. jsonschema is imported when a submission is first
checked, so the Slack ingress's cold start never loads it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from slack_sdk.models.blocks import (
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from shared.limits import loads_untrusted
from shared.slack import call_view

if TYPE_CHECKING:
    import jsonschema

CALLBACK_ID = "approval_edit"
VALUE = "value"  # every input's action_id, but that of a value shown as JSON instead of its schema's kind of field
AS_JSON = "json"
OTHERS = "*others"  # the JSON field for arguments the schema does not name
TEXT_MAX = 3000  # Slack's plain_text_input max_length
MAX_BLOCKS = 100  # in a modal (the sentence, a field per declared argument, one for the undeclared ones)
BLOCK_ID_MAX = 255


def _kind(spec: Mapping[str, Any]) -> str:
    kind = spec.get("type")
    if kind in {"string", "integer", "number", "boolean"}:
        return "enum" if kind == "string" and isinstance(spec.get("enum"), list) and spec["enum"] else str(kind)
    return "json"


def _invisible(text: str) -> bool:
    """True if ``text`` has a character a text field would not show as it is (bidi, zero-width, controls but the
    line break): the card shows those as escapes, and so does the modal, in a JSON field."""
    return any(call_view.hidden(c) and c not in "<>&\n" for c in text)


def json_text(value: Any) -> str:
    """A value as a JSON field shows it: indented, every character a text field would hide as a JSON escape (so the
    text parses back to exactly ``value``)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    return "".join(call_view.escape(c) if _invisible(c) else c for c in text)


def _shown_as(spec: Mapping[str, Any], value: Any) -> str:
    """The kind of field that shows an argument's ``value`` as it is: its schema's, or JSON for a value that field
    would show otherwise or not at all (``null``, another type, a value its enum does not list, a string with a
    character a text field would hide)."""
    kind = _kind(spec)
    if isinstance(value, str) and _invisible(value):
        return "json"
    if kind == "string":
        return kind if isinstance(value, str) else "json"
    if kind == "enum":
        listed = [str(v)[:150] for v in spec["enum"][:100] if isinstance(v, str)]
        return kind if isinstance(value, str) and value in listed else "json"
    if kind == "boolean":
        return kind if isinstance(value, bool) else "json"
    try:  # a number as typed in its field must read back as the very value
        same = not isinstance(value, bool) and isinstance(value, int | float) and _convert(str(value), kind) == value
    except ValueError:
        same = False
    return kind if same and type(_convert(str(value), kind)) is type(value) else "json"


def _block(name: str, spec: Mapping[str, Any], value: Any, *, required: bool, present: bool = False) -> InputBlock:
    """``present``: the call has this argument (``value``, which may be ``null``), shown as it is."""
    kind = _shown_as(spec, value) if present else _kind(spec)
    action = AS_JSON if kind != _kind(spec) else VALUE
    label = name[:2000]
    hint = str(spec.get("description") or "")[:2000] or None
    element: Any
    if kind == "enum":
        options = [Option(value=str(v)[:150], text=str(v)[:75]) for v in spec["enum"][:100]]
        chosen = next((o for o in options if value is not None and o.value == str(value)), None)
        element = StaticSelectElement(action_id=VALUE, options=options, initial_option=chosen)
    elif kind == "boolean":
        options = [Option(value="true", text="true"), Option(value="false", text="false")]
        chosen = None if value is None else options[0 if value else 1]
        element = StaticSelectElement(action_id=VALUE, options=options, initial_option=chosen)
    elif kind in {"integer", "number"}:
        element = NumberInputElement(action_id=VALUE, is_decimal_allowed=kind == "number",
                                     initial_value=None if value is None else str(value))  # fmt: skip
    elif kind == "string":
        text = value if isinstance(value, str) else None
        element = PlainTextInputElement(action_id=VALUE, initial_value=text, multiline=bool(text and "\n" in text),
                                        max_length=TEXT_MAX)  # fmt: skip
    else:
        shown = json_text(value) if present or value is not None else None
        element = PlainTextInputElement(action_id=action, multiline=True, initial_value=shown, max_length=TEXT_MAX)
        hint = ((hint + " · ") if hint else "") + "JSON"
    return InputBlock(block_id=f"arg:{name}", label=label, element=element, optional=not required, hint=hint)


def fits(schema: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    """True if every argument fits its field: Slack refuses a text input whose ``initial_value`` is longer than
    ``TEXT_MAX`` (``invalid_arguments`` at ``views.open``), so a call with one is offered no Edit button; so is one
    whose modal would have more than ``MAX_BLOCKS`` blocks, or a field's block id longer than ``BLOCK_ID_MAX``."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    others = {k: v for k, v in args.items() if k not in properties}
    if 1 + len(properties) + bool(others) > MAX_BLOCKS or any(len(f"arg:{n}") > BLOCK_ID_MAX for n in properties):
        return False
    shown = [json_text(others)] if others else []
    for name, value in args.items():
        if name not in properties:
            continue
        kind = _shown_as(properties[name], value)
        if kind == "string":
            shown.append(value)
        elif kind == "json":
            shown.append(json_text(value))
    return all(len(text) <= TEXT_MAX for text in shown)


def view(private_metadata: str, tool: str, *, schema: Mapping[str, Any], args: Mapping[str, Any],
         order: Sequence[str]) -> View:  # fmt: skip
    """The modal for editing one call: an input per argument, in the card's order, then one per declared argument
    the call left out; ``private_metadata``: what it was opened on (``seal``)."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = [n for n in order if n in properties] + [n for n in properties if n not in set(order)]
    blocks: list[Any] = [
        ContextBlock(elements=[MarkdownTextObject(text=f"Edit the arguments of `{tool}`. Submitting approves the "
                                                       "edited call, which then runs instead of the original.")])
    ]  # fmt: skip
    blocks += [_block(n, properties[n], args.get(n), required=n in required, present=n in args) for n in names]
    others = {k: v for k, v in args.items() if k not in properties}
    if others:
        blocks.append(_block(OTHERS, {}, others, required=False))
    return View(type="modal", callback_id=CALLBACK_ID, title="Edit the call", submit="Approve edited",
                close="Cancel", private_metadata=private_metadata, blocks=blocks)  # fmt: skip


class Ticket(NamedTuple):
    """What an Edit modal was opened on, sealed in its ``private_metadata``: the approval, the digest and revision
    of the call it showed, and the person it was opened for (only they may submit it)."""

    approval_id: str
    digest: str
    revision: int
    opener: str


def _mac(body: str, key: str) -> str:
    return hmac.new(key.encode(), f"approval-edit-modal\n{body}".encode(), hashlib.sha256).hexdigest()[:32]


def seal(ticket: Ticket, key: str) -> str:
    """``ticket`` as a modal's ``private_metadata``, with a MAC under ``key``: a submission whose metadata was not
    sealed here for that approval, call revision and person (another approval's, a guessed one) is refused."""
    body = "|".join((ticket.approval_id, ticket.digest, str(ticket.revision), ticket.opener))
    return f"{body}|{_mac(body, key)}"


def unseal(private_metadata: str, key: str) -> Ticket | None:
    """The ticket a modal's ``private_metadata`` carries, or None if it was not sealed with ``key``."""
    body, _, mac = private_metadata.rpartition("|")
    parts = body.rsplit("|", 3)
    sealed = hmac.compare_digest(mac.encode(), _mac(body, key).encode())
    if not sealed or len(parts) != 4 or not all(parts) or not parts[2].isdigit():
        return None
    return Ticket(parts[0], parts[1], int(parts[2]), parts[3])


def _raw(element: Mapping[str, Any]) -> str | None:
    if element.get("type") == "static_select":
        option = element.get("selected_option") or {}
        return option.get("value") if isinstance(option, dict) else None
    value = element.get("value")
    return value if isinstance(value, str) else None


def _convert(raw: str, kind: str) -> Any:
    if kind in {"string", "enum"}:
        return raw
    if kind == "boolean":
        return raw == "true"
    if kind in {"integer", "number"}:
        try:
            return int(raw)  # as typed: through a float, a large whole number would change
        except ValueError:
            number = float(raw)
        if not math.isfinite(number):  # JSON has no NaN or infinity
            raise ValueError(f"{raw} is not a finite number")
        if kind == "integer" and not number.is_integer():
            raise ValueError(f"{raw} is not a whole number")
        return int(number) if kind == "integer" or (number.is_integer() and "." not in raw) else number
    return loads_untrusted(raw)


def parse(schema: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The edited arguments from a submission's ``view.state.values``, and errors by block id (empty when valid
    against the schema)."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    args: dict[str, Any] = {}
    errors: dict[str, str] = {}
    undeclared: set[str] = set()  # the names given in the JSON field of the arguments the schema does not name
    for block_id, actions in values.items():
        name = block_id.removeprefix("arg:")
        as_json = isinstance(actions, dict) and VALUE not in actions and AS_JSON in actions
        element = (actions.get(AS_JSON if as_json else VALUE)) if isinstance(actions, dict) else None
        raw = _raw(element) if isinstance(element, dict) else None
        if raw is None or raw == "":
            continue
        kind = _kind(properties.get(name) or {}) if name != OTHERS and not as_json else "json"
        try:
            value = _convert(raw, kind)
        except ValueError as exc:
            errors[block_id] = f"Not a valid {'JSON value' if kind == 'json' else kind}: {exc}"[:150]
            continue
        if name != OTHERS:
            args[name] = value
        elif (wrong := _others_error(value, properties)) is not None:
            errors[block_id] = wrong
        else:
            args.update(value)
            undeclared |= set(value)
    if errors:
        return args, errors
    return args, _schema_errors(schema, values, args, undeclared)


def _others_error(value: Any, properties: Mapping[str, Any]) -> str | None:
    """What is wrong with the value of the field of the arguments the schema does not name, or None."""
    if not isinstance(value, dict):
        return "A JSON object of argument name to value"
    own = [n for n in value if n in properties]  # it would silently replace what that argument's own field shows
    return f"Has its own field above: {', '.join(map(repr, own))}"[:150] if own else None


def _schema_errors(schema: Mapping[str, Any], values: Mapping[str, Any], args: dict[str, Any],
                   undeclared: set[str]) -> dict[str, str]:  # fmt: skip
    """The arguments checked against the schema, errors by block id; ``undeclared``: the names given in the field of
    the others."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    errors: dict[str, str] = {}
    import jsonschema  # the ingress pays for it at the first edit, never at its cold start
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    # A ``$ref`` resolves within the schema only: jsonschema would otherwise fetch any URL an MCP server names.
    validator = jsonschema.validators.validator_for(schema)(schema, registry=Registry())
    try:
        for error in validator.iter_errors(args):
            where = str(error.path[0]) if error.path else _missing(error) or ""
            block_id = f"arg:{where}" if where in properties else next(iter(values), "arg:")
            if where not in properties and (where in undeclared or error.validator == "additionalProperties"):
                block_id = f"arg:{OTHERS}" if f"arg:{OTHERS}" in values else block_id
            errors.setdefault(block_id, error.message[:150])
    except Unresolvable as exc:
        errors[next(iter(values), "arg:")] = f"The tool's schema refers to {exc.ref!r}, which is not fetched"[:150]
    unknown = unnamed_keys(schema, args)
    if unknown and not errors:  # JSON Schema lets them pass; the tool would refuse them when the call runs
        takes = ", ".join(properties) or "no arguments"
        where = f"arg:{OTHERS}" if f"arg:{OTHERS}" in values else next(iter(values), "arg:")
        errors[where] = f"Not an argument of this tool: {', '.join(map(repr, unknown))} (it takes: {takes})"[:150]
    return errors


def named_keys(schema: Mapping[str, Any]) -> set[str]:
    """The top-level argument names a schema declares, in ``properties`` or in the object schemas it combines."""
    names = set(schema.get("properties") or {}) if isinstance(schema.get("properties"), dict) else set()
    for combined in ("allOf", "anyOf", "oneOf"):
        for part in schema.get(combined) or []:
            if isinstance(part, dict):
                names |= named_keys(part)
    return names


def unnamed_keys(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """The keys of ``args`` the schema neither names nor matches with a ``patternProperties`` pattern, when it says
    nothing of others (``additionalProperties`` true or a schema allows them, false makes the validator refuse
    them). What an operator approves and a tool runs is only what its schema describes: an MCP call, and an edit."""
    if "additionalProperties" in schema:
        return []
    named = named_keys(schema)
    patterns = [p for p in (schema.get("patternProperties") or {}) if isinstance(p, str)]
    return [key for key in args if key not in named and not any(_matches(p, key) for p in patterns)]


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def _missing(error: jsonschema.ValidationError) -> str | None:
    """The property a ``required`` error names."""
    names = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(names, list):
        return next((str(n) for n in names if n not in error.instance), None)
    return None

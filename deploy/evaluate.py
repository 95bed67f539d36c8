"""Evaluate the configuration's expressions offline, as ``terraform plan`` would if it could run.

``terraform init`` cannot download the google provider here, so plan is out of
reach. This evaluates what the configuration computes from its inputs:
literals, ``var.*`` (defaults, ``optional()`` attribute defaults, overrides like a
tfvars file), ``local.*``, ``for`` expressions, conditionals and the functions in
``FUNCTIONS``. Anything known only after apply (a resource attribute, ``self``,
a function not listed) comes back as an ``Unknown`` carrying its expression, with
what is known filled in: ``google_service_account.function["sweep"].email``.
``instances`` plans each instance of a resource the same way, ``dynamic`` blocks included.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy.hcl_syntax import EvalError, Node, parse_expression, scan_braces
from deploy.terraform import Block, Module, body_items, is_block_list, unquote


@dataclass(frozen=True)
class Unknown:
    """A value known only after apply (or not evaluated here); ``text`` is its expression."""

    text: str

    def __str__(self) -> str:
        return self.text


def _tostring(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float)):
        return str(value)
    raise EvalError(f"tostring of {value!r}")


def _merge(*maps: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for item in maps:
        if item is None:
            continue
        if not isinstance(item, dict):
            raise EvalError(f"merge of a non-map {item!r}")
        merged.update(item)
    return merged


def _concat(*lists: Any) -> list[Any]:
    return [item for sequence in lists for item in sequence]


def _coalesce(*values: Any) -> Any:
    for value in values:
        if value is not None and value != "":
            return value
    raise EvalError("coalesce: no non-null argument")


def _lookup(mapping: Any, key: Any, *default: Any) -> Any:
    if key in mapping:
        return mapping[key]
    if default:
        return default[0]
    raise EvalError(f"lookup: no key {key!r}")


def _set(values: Any) -> list[Any]:
    """A set as a list: Terraform iterates sets of strings in lexical order."""
    return sorted(set(values), key=str)


def _regex(pattern: str, text: str) -> Any:
    """Terraform's ``regex``: the first match (its groups when it has any); an error when nothing matches.

    Python's ``re`` stands in for RE2; the patterns used in validations are in their common subset.
    """
    match = re.search(pattern, text)
    if match is None:
        raise EvalError(f"regex {pattern!r} does not match {text!r}")
    if match.groupdict():
        return match.groupdict()
    return list(match.groups()) if match.groups() else match.group(0)


def _all_bools(values: Any, combine: Callable[[Any], bool]) -> bool:
    if not all(isinstance(value, bool) for value in values):
        raise EvalError(f"alltrue/anytrue of non-booleans {values!r}")
    return combine(values)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "merge": _merge,
    "concat": _concat,
    "tostring": _tostring,
    "tonumber": lambda value: float(value) if "." in str(value) else int(value),
    "tolist": list,
    "toset": _set,
    "tomap": dict,
    "keys": sorted,
    "values": lambda mapping: [mapping[key] for key in sorted(mapping)],
    "lookup": _lookup,
    "coalesce": _coalesce,
    "contains": lambda collection, value: value in collection,
    "length": len,
    "join": lambda separator, items: separator.join(_tostring(item) for item in items),
    "replace": lambda text, old, new: text.replace(old, new),
    "upper": lambda text: text.upper(),
    "lower": lambda text: text.lower(),
    "trimspace": lambda text: text.strip(),
    "base64encode": lambda text: base64.b64encode(text.encode()).decode(),
    "jsonencode": lambda value: json.dumps(value, separators=(",", ":")),
    "regex": _regex,
    "alltrue": lambda values: _all_bools(values, all),
    "anytrue": lambda values: _all_bools(values, any),
    "startswith": lambda text, prefix: text.startswith(prefix),
    "endswith": lambda text, suffix: text.endswith(suffix),
    "setintersection": lambda first, *rest: _set(set(first).intersection(*map(set, rest))),
}


def _contains_unknown(value: Any) -> bool:
    if isinstance(value, Unknown):
        return True
    if isinstance(value, dict):
        return any(_contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_unknown(v) for v in value)
    return False


def _unescape(text: str) -> str:
    return text.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


class Evaluator:
    """Evaluates python-hcl2 values of one module, with variables and an optional scope (``each``)."""

    def __init__(self, module: Module, values: dict[str, Any]) -> None:
        self.module = module
        self._locals_raw = module.locals
        self._locals: dict[str, Any] = {}
        self._evaluating: set[str] = set()
        self.variables = {name: self._variable(name, block, values) for name, block in module.variables.items()}
        unknown = set(values) - set(self.variables)
        if unknown:
            raise EvalError(f"values for undeclared variables: {sorted(unknown)}")

    def _variable(self, name: str, block: Block, values: Mapping[str, Any]) -> Any:
        body = dict(body_items(block.body))
        if name in values:
            value = values[name]
        elif "default" in body:
            value = self.value(body["default"], {})
        else:
            return Unknown(f"var.{name}")  # required and not given: unknown, not an error
        type_text = body.get("type")
        if isinstance(type_text, str) and isinstance(value, dict):
            value = self._apply_optional_defaults(type_text, value)
        return value

    def _apply_optional_defaults(self, type_text: str, value: dict[str, Any]) -> dict[str, Any]:
        """Fill ``object({a = optional(T, default)})`` defaults in, as Terraform does for a variable."""
        node = parse_expression(type_text[2:-1] if type_text.startswith("${") else type_text)
        if node[0] != "call" or node[2] != "object" or not node[3] or node[3][0][0] != "object":
            return value
        filled = dict(value)
        for key_node, attr_node in node[3][0][2]:
            key = key_node[2]
            if key in filled or attr_node[0] != "call" or attr_node[2] != "optional":
                continue
            args = attr_node[3]
            filled[key] = self.node(args[1], {}) if len(args) > 1 else None
        return filled

    def failed_validations(self) -> list[str]:
        """The error message of every ``validation`` block whose condition is false for these values.

        A condition that cannot be decided offline (it depends on something unknown) is not a failure.
        """
        failures: list[str] = []
        for name, block in self.module.variables.items():
            for validation in block.body.get("validation", []):
                condition = self.value(validation["condition"], {})
                if condition is False:
                    failures.append(f"var.{name}: {self.value(validation['error_message'], {})}")
                elif not isinstance(condition, (bool, Unknown)):
                    raise EvalError(f"var.{name}: a validation condition gave {condition!r}, not a bool")
        return failures

    def local(self, name: str) -> Any:
        if name not in self._locals:
            if name not in self._locals_raw:
                raise EvalError(f"no local value {name!r}")
            if name in self._evaluating:
                raise EvalError(f"local.{name} refers to itself")
            self._evaluating.add(name)
            try:
                self._locals[name] = self.value(self._locals_raw[name], {})
            finally:
                self._evaluating.discard(name)
        return self._locals[name]

    def value(self, raw: Any, scope: Mapping[str, Any] | None = None) -> Any:
        """Evaluate a value as python-hcl2 gives it: literals, dicts, lists and ``"${...}"`` strings."""
        scope = scope or {}
        if isinstance(raw, dict):
            return {unquote(key): self.value(item, scope) for key, item in body_items(raw)}
        if isinstance(raw, list):
            return [self.value(item, scope) for item in raw]
        if isinstance(raw, str):
            return self.text(raw, scope)
        return raw

    def text(self, raw: str, scope: Mapping[str, Any]) -> Any:
        if raw.startswith("${") and scan_braces(raw, 1) == len(raw):
            return self.node(parse_expression(raw[2:-1]), scope)
        if raw.startswith('"<<'):  # heredoc: <<EOT\n...\nEOT
            lines = raw[1:-1].split("\n")
            return "\n".join(lines[1:-1]) + "\n"
        if raw.startswith('"'):
            return self.node(("template", raw), scope)
        return self.node(parse_expression(raw), scope)

    def expression(self, text: str, scope: Mapping[str, Any] | None = None) -> Any:
        """Evaluate expression source text, e.g. ``local.functions["sweep"].timeout``."""
        return self.node(parse_expression(text), scope or {})

    def node(self, node: Node, scope: Mapping[str, Any]) -> Any:  # noqa: PLR0912 - one branch per node kind
        kind, source = node[0], node[1]
        if kind == "literal":
            return node[2]
        if kind == "template":
            return self._template(source, scope)
        if kind == "name":
            return self._name(node[2], scope, source)
        if kind in {"get", "attr"}:
            return self._get(node, scope)
        if kind == "tuple":
            return [self.node(item, scope) for item in node[2]]
        if kind == "object":
            return {self._key(key, scope): self.node(item, scope) for key, item in node[2]}
        if kind == "call":
            return self._call(node, scope)
        if kind == "cond":
            condition = self.node(node[2], scope)
            if isinstance(condition, Unknown):
                return Unknown(source)
            return self.node(node[3] if condition else node[4], scope)
        if kind == "unary":
            operand = self.node(node[3], scope)
            if isinstance(operand, Unknown):
                return Unknown(source)
            return (not operand) if node[2] == "!" else -operand
        if kind == "binary":
            return self._binary(node, scope)
        if kind == "for":
            return self._for(node, scope)
        return Unknown(source)

    def _key(self, node: Node, scope: Mapping[str, Any]) -> str:
        key = self.node(node, scope) if node[0] != "literal" else node[2]
        if isinstance(key, Unknown):
            raise EvalError(f"object key only known after apply: {node[1]}")
        return str(key)

    def _template(self, source: str, scope: Mapping[str, Any]) -> Any:
        inner = source[1:-1]
        parts: list[str] = []
        known = True
        i = 0
        while i < len(inner):
            if inner.startswith("${", i):
                end = scan_braces(inner, i + 1)
                value = self.node(parse_expression(inner[i + 2 : end - 1]), scope)
                if isinstance(value, Unknown):
                    # Known only after apply: keep it as an interpolation of what is known.
                    known = False
                    parts.append(f"${{{value.text}}}")
                elif _contains_unknown(value) or isinstance(value, (dict, list)) or value is None:
                    return Unknown(source)
                else:
                    parts.append(_tostring(value))
                i = end
                continue
            if inner.startswith("%{", i):
                return Unknown(source)
            if inner[i] == "\\" and i + 1 < len(inner):
                parts.append(_unescape(inner[i : i + 2]))
                i += 2
                continue
            parts.append(inner[i])
            i += 1
        return "".join(parts) if known else Unknown("".join(parts))

    def _name(self, name: str, scope: Mapping[str, Any], source: str) -> Any:
        if name in scope:
            return scope[name]
        if name in {"var", "local"}:
            return _Namespace(name)
        return Unknown(source)

    def _get(self, node: Node, scope: Mapping[str, Any]) -> Any:
        source, target_node = node[1], node[2]
        target = self.node(target_node, scope)
        index = node[3] if node[0] == "attr" else self.node(node[3], scope)
        if isinstance(index, Unknown):
            return Unknown(source)
        if isinstance(target, Unknown):
            # Keep the reference readable with what is known: function["sweep"], not function[each.key].
            if node[0] == "attr":
                return Unknown(f"{target.text}.{index}")
            return Unknown(f"{target.text}[{json.dumps(index)}]")
        if isinstance(target, _Namespace):
            if target.name == "var":
                if index not in self.variables:
                    raise EvalError(f"undeclared variable in {source}")
                return self.variables[index]
            return self.local(str(index))
        if isinstance(target, dict):
            if index not in target:
                raise EvalError(f"{source}: no key {index!r} (keys: {sorted(target)})")
            return target[index]
        if isinstance(target, list) and isinstance(index, int):
            return target[index]
        raise EvalError(f"cannot index {target!r} with {index!r} in {source}")

    def _call(self, node: Node, scope: Mapping[str, Any]) -> Any:
        source, name, arg_nodes, spread = node[1], node[2], node[3], node[4]
        if name == "try":
            for arg in arg_nodes:
                try:
                    result = self.node(arg, scope)
                except (EvalError, KeyError, IndexError, TypeError):
                    continue
                return result
            raise EvalError(f"no argument of {source} evaluates")
        if name == "can":
            try:
                result = self.node(arg_nodes[0], scope)
            except (EvalError, KeyError, IndexError, TypeError):
                return False
            return Unknown(source) if _contains_unknown(result) else True
        function = FUNCTIONS.get(name)
        if function is None:
            return Unknown(source)
        args = [self.node(arg, scope) for arg in arg_nodes]
        if spread:
            if not isinstance(args[-1], list):
                return Unknown(source)
            args = [*args[:-1], *args[-1]]
        if any(isinstance(arg, Unknown) for arg in args):
            return Unknown(source)
        try:
            return function(*args)
        except (TypeError, ValueError, AttributeError) as exc:
            raise EvalError(f"{source}: {exc}") from exc

    def _binary(self, node: Node, scope: Mapping[str, Any]) -> Any:
        source, op = node[1], node[2]
        left, right = self.node(node[3], scope), self.node(node[4], scope)
        if isinstance(left, Unknown) or isinstance(right, Unknown):
            return Unknown(source)
        operations: dict[str, Callable[[Any, Any], Any]] = {
            "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "&&": lambda a, b: a and b,
            "||": lambda a, b: a or b,
            "<": lambda a, b: a < b,
            ">": lambda a, b: a > b,
            "<=": lambda a, b: a <= b,
            ">=": lambda a, b: a >= b,
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "/": lambda a, b: a / b,
            "%": lambda a, b: a % b,
        }
        return operations[op](left, right)

    def _for(self, node: Node, scope: Mapping[str, Any]) -> Any:
        source, names, collection_node, key_node, value_node, condition_node = node[1:]
        collection = self.node(collection_node, scope)
        if isinstance(collection, Unknown):
            return Unknown(source)
        pairs: Sequence[tuple[Any, Any]] = (
            sorted(collection.items()) if isinstance(collection, dict) else list(enumerate(collection))
        )
        is_object = key_node is not None
        result_list: list[Any] = []
        result_map: dict[str, Any] = {}
        for key, item in pairs:
            inner = dict(scope)
            if len(names) == 2:
                inner[names[0]], inner[names[1]] = key, item
            else:
                inner[names[0]] = item
            if condition_node is not None:
                condition = self.node(condition_node, inner)
                if isinstance(condition, Unknown):
                    return Unknown(source)
                if not condition:
                    continue
            if is_object:
                result_map[self._key(key_node, inner)] = self.node(value_node, inner)
            else:
                result_list.append(self.node(value_node, inner))
        return result_map if is_object else result_list


@dataclass(frozen=True)
class _Namespace:
    """``var`` or ``local`` before the attribute that names the value."""

    name: str


def _pairs(collection: Any, source: str) -> list[tuple[Any, Any]]:
    """``for_each`` pairs: a map's (key, value), a set's (value, value)."""
    if isinstance(collection, dict):
        return sorted(collection.items())
    if isinstance(collection, list):
        return [(item, item) for item in collection]
    raise EvalError(f"for_each is only known after apply: {source}")


def instances(evaluator: Evaluator, block: Block) -> dict[str, dict[str, Any]]:
    """Each instance of a resource as Terraform would plan it, by instance key ("" without for_each).

    Arguments are evaluated in the instance's scope (``each``), nested blocks become lists
    of such dicts, and ``dynamic`` blocks are expanded into the blocks they generate.
    """
    body = block.body
    if "for_each" in body:
        collection = evaluator.value(body["for_each"])
        return {
            str(key): expand(evaluator, body, {"each": {"key": key, "value": value}})
            for key, value in _pairs(collection, f"{block.address}.for_each")
        }
    if "count" in body:
        count = evaluator.value(body["count"])
        if not isinstance(count, int):
            raise EvalError(f"count is only known after apply: {block.address}")
        return {str(index): expand(evaluator, body, {"count": {"index": index}}) for index in range(count)}
    return {"": expand(evaluator, body, {})}


def expand(evaluator: Evaluator, body: Mapping[str, Any], scope: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in body_items(body):
        if key in {"for_each", "count"}:
            continue
        if key == "dynamic":
            for item in value if isinstance(value, list) else [value]:
                for label, spec in body_items(item):
                    name = unquote(label)
                    iterator = str(spec.get("iterator", name)).removeprefix("${").removesuffix("}")
                    collection = evaluator.value(spec["for_each"], scope)
                    generated = result.setdefault(name, [])
                    for item_key, item_value in _pairs(collection, f"dynamic {name}"):
                        inner = {**scope, iterator: {"key": item_key, "value": item_value}}
                        generated.extend(expand(evaluator, content, inner) for content in spec.get("content", []))
        elif is_block_list(value):
            result.setdefault(key, []).extend(expand(evaluator, nested, scope) for nested in value)
        else:
            result[key] = evaluator.value(value, scope)
    return result


def evaluator(module: Module, values: Mapping[str, Any] | None = None) -> Evaluator:
    """An evaluator of ``module`` with the variables' defaults, overridden by ``values`` (like a tfvars file)."""
    return Evaluator(module, dict(values or {}))

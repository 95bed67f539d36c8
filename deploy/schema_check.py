"""Check every block in ``terraform/`` against the google provider's schema, offline.

What ``terraform validate`` would say about arguments if it could download the
provider: an unknown or misspelled argument or block, a missing required one,
an argument written as a block (or the reverse), two of a block that takes one,
and a reference to an attribute a resource does not have
(``google_service_account.x.emial``). ``dynamic`` blocks are checked through
their ``content``. Run ``python -m deploy.schema_check [dir]``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.provider_schema import BlockSchema, ProviderSchema, load
from deploy.terraform import Block, Module, body_items, is_block_list, unquote

ROOT = Path(__file__).resolve().parent.parent

# Terraform's own arguments and blocks, valid in every resource and data block.
META_ARGUMENTS = frozenset({"count", "for_each", "depends_on", "provider"})
META_BLOCKS = frozenset({"lifecycle", "provisioner", "connection"})
DYNAMIC_KEYS = frozenset({"for_each", "iterator", "labels", "content"})
# Resource types that belong to Terraform itself rather than to a provider.
BUILTIN_RESOURCES = frozenset({"terraform_data"})

_REFERENCE = re.compile(
    r"(?<![\w.\"-])(?P<data>data\.)?(?P<type>google_[a-z0-9_]+)\.(?P<name>[a-zA-Z_][\w-]*)"
    r"(?:\[[^\]]*\])?(?:\.(?P<attr>[a-z_][a-z0-9_]*))?"
)


@dataclass(frozen=True)
class Problem:
    file: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"


def _suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Checker:
    def __init__(self, schema: ProviderSchema, module: Module) -> None:
        self.schema = schema
        self.module = module
        self.problems: list[Problem] = []

    def report(self, block: Block, where: str, message: str) -> None:
        self.problems.append(Problem(block.file.name, where, message))

    def run(self) -> list[Problem]:
        for block in self.module.blocks:
            if block.kind == "resource":
                self._top(block, self.schema.resources, "resource type")
            elif block.kind == "data":
                self._top(block, self.schema.data_sources, "data source")
            elif block.kind == "provider" and block.labels == ("google",):
                self.body(block, block.body, self.schema.provider, "provider.google", top_level=False)
            elif block.kind == "provider":
                self.report(block, f"provider.{block.labels[0]}", "no schema for this provider")
        self._references()
        return self.problems

    def _top(self, block: Block, schemas: Mapping[str, BlockSchema], what: str) -> None:
        kind = block.labels[0]
        if kind in BUILTIN_RESOURCES and block.kind == "resource":
            return
        schema = schemas.get(kind)
        if schema is None:
            self.report(block, block.address, f"unknown {what} {kind!r}{_suggest(kind, schemas)}")
            return
        self.body(block, block.body, schema, block.address, top_level=True)

    def body(self, block: Block, body: Mapping[str, Any], schema: BlockSchema, where: str, *, top_level: bool) -> None:
        present: set[str] = set()
        for name, value in body_items(body):
            if name == "dynamic":
                present |= self._dynamic(block, value, schema, where)
            elif is_block_list(value):
                present.add(name)
                self._nested(block, name, value, schema, where, top_level=top_level)
            elif name in schema.arguments or (top_level and name in META_ARGUMENTS):
                present.add(name)
            elif name in schema.blocks:
                self.report(block, where, f"{name!r} is a block: write `{name} {{ ... }}`, not `{name} = ...`")
            else:
                self.report(block, where, f"unknown argument {name!r}{_suggest(name, schema.arguments)}")
        for name, required in sorted(schema.arguments.items()):
            if required and name not in present:
                self.report(block, where, f"missing required argument {name!r}")
        for name in sorted(schema.required_blocks - present):
            self.report(block, where, f"missing required block {name!r}")

    def _nested(
        self, block: Block, name: str, value: list[Any], schema: BlockSchema, where: str, *, top_level: bool
    ) -> None:
        if top_level and name in META_BLOCKS:
            return
        if name in schema.arguments:
            self.report(block, where, f"{name!r} is an argument: write `{name} = ...`, not a block")
            return
        inner = schema.blocks.get(name)
        if inner is None:
            self.report(block, where, f"unknown block {name!r}{_suggest(name, schema.blocks)}")
            return
        if name in schema.single_blocks and len(value) > 1:
            self.report(block, where, f"block {name!r} may appear only once, found {len(value)}")
        for item in value:
            self.body(block, item, inner, f"{where}.{name}", top_level=False)

    def _dynamic(self, block: Block, value: Any, schema: BlockSchema, where: str) -> set[str]:
        names: set[str] = set()
        for item in value if isinstance(value, list) else [value]:
            for label, spec in body_items(item):
                name = unquote(label)
                names.add(name)
                inner = schema.blocks.get(name)
                if inner is None:
                    self.report(block, where, f"unknown dynamic block {name!r}{_suggest(name, schema.blocks)}")
                    continue
                extra = {key for key, _ in body_items(spec)} - DYNAMIC_KEYS
                if extra:
                    self.report(block, f"{where}.dynamic.{name}", f"unknown dynamic block arguments {sorted(extra)}")
                content = spec.get("content")
                if not is_block_list(content):
                    self.report(block, f"{where}.dynamic.{name}", "a dynamic block needs a content block")
                    continue
                for body in content:
                    self.body(block, body, inner, f"{where}.{name}", top_level=False)
        return names

    def _references(self) -> None:
        """Every ``google_x.name.attr`` in an expression names a declared resource and a real attribute."""
        declared = {(b.kind, b.labels[0], b.labels[1]) for b in self.module.blocks if b.kind in {"resource", "data"}}
        for block in self.module.blocks:
            # A `moved` block's `from` names a resource that is, by design, no longer declared.
            body = {k: v for k, v in block.body.items() if k != "from"} if block.kind == "moved" else block.body
            for text in _strings(body):
                for match in _REFERENCE.finditer(text):
                    self._reference(block, match, declared)

    def _reference(self, block: Block, match: re.Match[str], declared: set[tuple[str, str, str]]) -> None:
        kind = "data" if match.group("data") else "resource"
        resource_type, name, attr = match.group("type"), match.group("name"), match.group("attr")
        where = f"{block.address} -> {match.group(0)}"
        if (kind, resource_type, name) not in declared:
            self.report(block, where, f"refers to {resource_type}.{name}, which is not declared")
            return
        schemas = self.schema.resources if kind == "resource" else self.schema.data_sources
        schema = schemas.get(resource_type)
        if schema is not None and attr is not None and attr not in schema.attributes:
            self.report(block, where, f"{resource_type} has no attribute {attr!r}{_suggest(attr, schema.attributes)}")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def check(module: Module, schema: ProviderSchema) -> list[Problem]:
    """Every problem with ``module`` against ``schema``; empty when the configuration is valid."""
    return _Checker(schema, module).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check Terraform files against the google provider schema.")
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "terraform")
    args = parser.parse_args(argv)
    schema = load()
    problems = check(Module.load(args.directory), schema)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{args.directory}: {len(problems)} problem(s) against google provider {schema.version}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

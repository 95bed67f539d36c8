"""Read ``terraform/``: its blocks as python-hcl2 parses them, one ``Block`` each.

python-hcl2 represents a block as a dict marked ``__is_block__`` and nested
blocks as lists of those; labels and string values keep their quotes. These
helpers hide that. Expressions are evaluated by ``deploy.evaluate``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

META_KEYS = frozenset({"__is_block__", "__start_line__", "__end_line__", "__comments__", "__inline_comments__"})


@dataclass(frozen=True)
class Block:
    """One block of the configuration: ``resource "type" "name" {...}`` has labels (type, name)."""

    kind: str
    labels: tuple[str, ...]
    body: dict[str, Any]
    file: Path

    @property
    def address(self) -> str:
        return ".".join(self.labels) if self.kind == "resource" else ".".join((self.kind, *self.labels))


def unquote(text: str) -> str:
    """A label or key as python-hcl2 gives it (``'"name"'``) without its quotes."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def body_items(body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The arguments and nested blocks of a block body, without python-hcl2's bookkeeping keys."""
    for key, value in body.items():
        if key not in META_KEYS:
            yield key, value


def is_block_list(value: Any) -> bool:
    """True for how python-hcl2 represents nested blocks: a list of dicts marked ``__is_block__``."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and v.get("__is_block__") for v in value)


def _walk_blocks(kind: str, value: Any, labels: tuple[str, ...], file: Path) -> Iterator[Block]:
    if isinstance(value, dict) and value.get("__is_block__"):
        yield Block(kind, labels, value, file)
        return
    if isinstance(value, dict):
        for label, inner in value.items():
            if label not in META_KEYS:
                yield from _walk_blocks(kind, inner, (*labels, unquote(label)), file)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_blocks(kind, item, labels, file)


def parse_file(path: Path) -> list[Block]:
    """Every top-level block of one .tf file."""
    options = SerializationOptions(with_comments=False)
    with path.open() as handle:
        document = hcl2.load(handle, serialization_options=options)
    blocks: list[Block] = []
    for kind, value in document.items():
        if kind not in META_KEYS:
            blocks.extend(_walk_blocks(kind, value, (), path))
    return blocks


@dataclass
class Module:
    """A Terraform root module read from a directory of .tf files."""

    directory: Path
    blocks: list[Block] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path) -> Module:
        files = sorted(directory.glob("*.tf"))
        if not files:
            raise FileNotFoundError(f"no .tf files in {directory}")
        return cls(directory, [block for path in files for block in parse_file(path)])

    def of_kind(self, kind: str) -> list[Block]:
        return [block for block in self.blocks if block.kind == kind]

    def resources(self, resource_type: str) -> list[Block]:
        return [block for block in self.of_kind("resource") if block.labels[0] == resource_type]

    def resource(self, resource_type: str, name: str) -> Block:
        for block in self.resources(resource_type):
            if block.labels[1] == name:
                return block
        raise KeyError(f"no resource {resource_type}.{name} in {self.directory}")

    @property
    def locals(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for block in self.of_kind("locals"):
            merged.update(body_items(block.body))
        return merged

    @property
    def variables(self) -> dict[str, Block]:
        return {block.labels[0]: block for block in self.of_kind("variable")}

"""The google provider's resource schemas, read from the jsii assembly of ``cdktn-provider-google``.

``terraform providers schema`` needs the provider binary, which cannot be
downloaded here. The CDK for Terraform bindings on PyPI are generated from
that same schema and ship it as a jsii assembly: a JSON description of every
generated type, inside ``cdktn_provider_google/_jsii/provider-google@<v>.jsii.tgz``
(an npm tarball; its ``package/.jsii`` may be a redirect to a gzip-compressed
``.jsii.gz``). In it:

- each resource (data source) is a class whose docs link to the registry page
  ``.../docs/resources/<name> google_<name>``; its constructor takes a
  ``<Class>Config`` struct: the arguments;
- a struct property is an argument, or a nested block when its type is another
  struct of the assembly (directly for a single block, as an array in a union
  with ``IResolvable`` for a repeated one); ``optional`` absent means required;
- the Terraform name of a property is the anchor of its registry link
  (``...#service_account_email``), which also covers names the generator had
  to rename (``build`` became ``buildAttribute``);
- the class's other properties are the attributes readable after apply.
"""

from __future__ import annotations

import glob
import gzip
import importlib.util
import json
import os
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ASSEMBLY_ENV = "PROVIDER_SCHEMA_ASSEMBLY"
PACKAGE = "cdktn_provider_google"
DEPLOY_VENV = ROOT / ".venv-deploy"

_LINK = re.compile(
    r"\{@link https://registry\.terraform\.io/providers/hashicorp/google/(?P<version>[^/]+)/docs/"
    r"(?P<kind>resources|data-sources)/(?P<page>[a-z0-9_]+)(?:#(?P<anchor>[a-z0-9_]+))? (?P<label>[^}]+)\}"
)


class SchemaNotFound(FileNotFoundError):
    """The provider assembly is not installed; the message says how to install it."""


@dataclass
class BlockSchema:
    """Arguments and nested blocks of a block; ``required`` maps a name to whether it must be given."""

    arguments: dict[str, bool] = field(default_factory=dict)
    blocks: dict[str, BlockSchema] = field(default_factory=dict)
    required_blocks: set[str] = field(default_factory=set)
    single_blocks: set[str] = field(default_factory=set)  # at most one of these
    attributes: set[str] = field(default_factory=set)  # readable after apply (arguments included)


@dataclass
class ProviderSchema:
    version: str
    provider: BlockSchema
    resources: dict[str, BlockSchema]
    data_sources: dict[str, BlockSchema]


def find_assembly() -> Path:
    """The provider's jsii assembly: $PROVIDER_SCHEMA_ASSEMBLY, this interpreter's package, or .venv-deploy's."""
    explicit = os.environ.get(ASSEMBLY_ENV)
    if explicit:
        return Path(explicit)
    candidates: list[str] = []
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates += glob.glob(os.path.join(location, "_jsii", "*.jsii.tgz"))
    candidates += glob.glob(str(DEPLOY_VENV / "lib" / "python*" / "site-packages" / PACKAGE / "_jsii" / "*.jsii.tgz"))
    if not candidates:
        raise SchemaNotFound(
            f"the google provider schema ({PACKAGE} from PyPI) is not installed: run `make deploy-install`, "
            f"or point {ASSEMBLY_ENV} at a provider-google@*.jsii.tgz"
        )
    return Path(sorted(candidates)[-1])


def read_assembly(path: Path) -> dict[str, Any]:
    """The assembly JSON from a .jsii.tgz tarball, a .jsii.gz or a plain .jsii file, following redirects."""
    if path.name.endswith(".tgz") or path.name.endswith(".tar.gz"):
        with tarfile.open(path, "r:gz") as tarball:

            def member(name: str) -> bytes:
                handle = tarball.extractfile(f"package/{name}")
                if handle is None:
                    raise SchemaNotFound(f"{path} has no package/{name}")
                return handle.read()

            return _follow_redirect(json.loads(member(".jsii")), member)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return _follow_redirect(json.loads(data), lambda name: (path.parent / name).read_bytes())


def _follow_redirect(assembly: dict[str, Any], read: Any) -> dict[str, Any]:
    """jsii writes large assemblies compressed, leaving a small ``jsii/file-redirect`` in ``.jsii``."""
    if assembly.get("schema") != "jsii/file-redirect":
        return assembly
    data: bytes = read(assembly["filename"])
    if assembly.get("compression") == "gzip":
        data = gzip.decompress(data)
    result: dict[str, Any] = json.loads(data)
    return result


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _terraform_name(prop: Mapping[str, Any]) -> str:
    match = _LINK.search(json.dumps(prop.get("docs", {})))
    if match and match.group("anchor"):
        return match.group("anchor")
    return _snake(str(prop["name"]))


class _Reader:
    def __init__(self, assembly: dict[str, Any]) -> None:
        self.types: dict[str, dict[str, Any]] = assembly["types"]
        self.prefix = f"{assembly['name']}."
        self._structs: dict[str, BlockSchema] = {}

    def _is_struct(self, fqn: str) -> bool:
        kind = self.types.get(fqn, {})
        return fqn.startswith(self.prefix) and kind.get("kind") == "interface" and bool(kind.get("datatype"))

    def _block_type(self, type_ref: Mapping[str, Any]) -> tuple[str, bool] | None:
        """(struct fqn, single) when a property's type makes it a nested block, else None."""
        fqn = type_ref.get("fqn")
        if isinstance(fqn, str) and self._is_struct(fqn):
            return fqn, True
        for member in type_ref.get("union", {}).get("types", []):
            element = member.get("collection", {}).get("elementtype", {}).get("fqn")
            if isinstance(element, str) and self._is_struct(element):
                return element, False
        return None

    def _properties(self, fqn: str) -> list[dict[str, Any]]:
        """A struct's properties, including those of structs it extends in this assembly."""
        struct = self.types[fqn]
        props = list(struct.get("properties", []))
        for parent in struct.get("interfaces", []):
            if parent in self.types:
                props += self._properties(parent)
        return props

    def struct(self, fqn: str) -> BlockSchema:
        if fqn in self._structs:
            return self._structs[fqn]
        schema = BlockSchema()
        self._structs[fqn] = schema  # before recursing: a struct may (indirectly) contain itself
        for prop in self._properties(fqn):
            name = _terraform_name(prop)
            required = not prop.get("optional", False)
            block = self._block_type(prop["type"])
            if block is None:
                schema.arguments[name] = required
            else:
                schema.blocks[name] = self.struct(block[0])
                if required:
                    schema.required_blocks.add(name)
                if block[1]:
                    schema.single_blocks.add(name)
        schema.attributes = set(schema.arguments) | set(schema.blocks)
        return schema

    def read(self) -> ProviderSchema:
        resources: dict[str, BlockSchema] = {}
        data_sources: dict[str, BlockSchema] = {}
        provider: BlockSchema | None = None
        version = ""
        for definition in self.types.values():
            base = definition.get("base")
            if definition.get("kind") != "class" or base not in {
                "cdktn.TerraformResource",
                "cdktn.TerraformDataSource",
                "cdktn.TerraformProvider",
            }:
                continue
            params = definition.get("initializer", {}).get("parameters", [])
            config = next((p["type"].get("fqn") for p in params if p.get("name") == "config"), None)
            if not isinstance(config, str):
                continue
            schema = self.struct(config)
            if base == "cdktn.TerraformProvider":
                provider = schema
                continue
            match = _LINK.search(definition.get("docs", {}).get("summary", ""))
            if match is None:
                continue
            version = match.group("version")
            schema = self._with_attributes(schema, definition)
            (resources if base == "cdktn.TerraformResource" else data_sources)[match.group("label")] = schema
        if provider is None or not resources:
            raise SchemaNotFound("the assembly describes no google provider resources")
        return ProviderSchema(version, provider, resources, data_sources)

    def _with_attributes(self, schema: BlockSchema, definition: Mapping[str, Any]) -> BlockSchema:
        """The resource's schema plus what can be read from it after apply (``.url``, ``.email``)."""
        readable = {
            _terraform_name(prop)
            for prop in definition.get("properties", [])
            if not prop.get("static") and not str(prop["name"]).endswith("Input")
        }
        return BlockSchema(
            arguments=schema.arguments,
            blocks=schema.blocks,
            required_blocks=schema.required_blocks,
            single_blocks=schema.single_blocks,
            attributes=schema.attributes | readable,
        )


def load(path: Path | None = None) -> ProviderSchema:
    """Read the provider schema from the installed assembly (a few seconds: it is ~130 MB of JSON)."""
    return _Reader(read_assembly(path or find_assembly())).read()

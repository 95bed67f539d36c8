"""terraform/ against the google provider schema from the cdktn-provider-google jsii assembly."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from deploy.provider_schema import ProviderSchema, read_assembly
from deploy.schema_check import check, main
from deploy.terraform import Module
from tests.deploy.conftest import TERRAFORM

VALID = """
resource "google_service_account" "runner" {
  account_id = "runner"
}

resource "google_cloudfunctions2_function" "fn" {
  name     = "fn"
  location = "us-central1"

  build_config {
    runtime     = "python312"
    entry_point = "main"
  }

  service_config {
    service_account_email = google_service_account.runner.email
    dynamic "secret_environment_variables" {
      for_each = toset(["A"])
      content {
        key        = secret_environment_variables.value
        project_id = "p"
        secret     = "s"
        version    = "latest"
      }
    }
  }
}
"""


def problems_in(tmp_path: Path, schema: ProviderSchema, text: str) -> list[str]:
    (tmp_path / "main.tf").write_text(text)
    return [str(problem) for problem in check(Module.load(tmp_path), schema)]


def test_terraform_matches_the_provider_schema(module: Module, provider_schema: ProviderSchema) -> None:
    problems = check(module, provider_schema)
    assert not problems, "\n".join(str(problem) for problem in problems)


def test_the_schema_is_the_pinned_provider_version(provider_schema: ProviderSchema) -> None:
    versions = (TERRAFORM / "versions.tf").read_text()
    major_minor = ".".join(provider_schema.version.split(".")[:2])
    assert f'version = "~> {major_minor}"' in versions, f"versions.tf should pin the schema's {major_minor}"


def test_the_schema_knows_nested_blocks_and_required_arguments(provider_schema: ProviderSchema) -> None:
    function = provider_schema.resources["google_cloudfunctions2_function"]
    assert function.arguments["name"]
    assert function.arguments["location"]
    assert {"build_config", "service_config"} <= function.single_blocks
    assert "url" in function.attributes  # readable after apply
    service = function.blocks["service_config"]
    assert service.arguments["timeout_seconds"] is False
    secret = service.blocks["secret_environment_variables"]
    assert all(secret.arguments[name] for name in ("key", "project_id", "secret", "version"))
    index = provider_schema.resources["google_firestore_index"]
    assert "fields" in index.required_blocks
    assert "fields" not in index.single_blocks
    # Names the generator renamed are read from the registry anchors: cloudbuild_trigger's `build` block.
    assert "build" in provider_schema.resources["google_cloudbuild_trigger"].blocks
    assert "number" in provider_schema.data_sources["google_project"].attributes


def test_a_valid_file_passes(tmp_path: Path, provider_schema: ProviderSchema) -> None:
    assert problems_in(tmp_path, provider_schema, VALID) == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (
            ('entry_point = "main"', 'entry_pont = "main"'),
            "unknown argument 'entry_pont' (did you mean 'entry_point'?)",
        ),
        (('  location = "us-central1"\n', ""), "missing required argument 'location'"),
        (('account_id = "runner"', 'display_name = "runner"'), "missing required argument 'account_id'"),
        (("build_config {", "bild_config {"), "unknown block 'bild_config'"),
        (("build_config {", "build_config = {"), "'build_config' is a block"),
        (('secret     = "s"', 'secrett    = "s"'), "unknown argument 'secrett' (did you mean 'secret'?)"),
        (('        secret     = "s"\n', ""), "missing required argument 'secret'"),
        (('dynamic "secret_environment_variables"', 'dynamic "secret_env_vars"'), "unknown dynamic block"),
        (("google_service_account.runner.email", "google_service_account.runner.emial"), "no attribute 'emial'"),
        (("google_service_account.runner.email", "google_service_account.other.email"), "not declared"),
        (('"google_service_account" "runner"', '"google_service_acount" "runner"'), "unknown resource type"),
    ],
)
def test_a_mistake_fails(
    tmp_path: Path, provider_schema: ProviderSchema, broken: tuple[str, str], expected: str
) -> None:
    old, new = broken
    assert old in VALID
    problems = problems_in(tmp_path, provider_schema, VALID.replace(old, new, 1))
    assert any(expected in problem for problem in problems), problems


def test_a_moved_block_may_come_from_a_resource_no_longer_declared(
    tmp_path: Path, provider_schema: ProviderSchema
) -> None:
    """`moved` keeps a renamed resource's state: its `from` is gone by design, its `to` must exist."""
    moved = "moved {\n  from = google_service_account.{old}\n  to   = google_service_account.{new}\n}\n"
    renamed = VALID + moved.replace("{old}", "old_runner").replace("{new}", "runner")
    assert problems_in(tmp_path, provider_schema, renamed) == []
    nowhere = VALID + moved.replace("{old}", "old_runner").replace("{new}", "nowhere")
    assert any("google_service_account.nowhere" in p for p in problems_in(tmp_path, provider_schema, nowhere))


def test_the_command_line_fails_on_a_mistake(
    tmp_path: Path, provider_schema: ProviderSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("deploy.schema_check.load", lambda: provider_schema)
    (tmp_path / "main.tf").write_text(VALID.replace('entry_point = "main"', 'entry_pont = "main"'))
    assert main([str(tmp_path)]) == 1


def test_a_compressed_assembly_is_followed(tmp_path: Path) -> None:
    """jsii may leave only a redirect in .jsii and put the assembly, gzipped, in .jsii.gz."""
    assembly = {"name": "@cdktn/provider-google", "types": {}}
    redirect = {"schema": "jsii/file-redirect", "compression": "gzip", "filename": ".jsii.gz"}
    path = tmp_path / "provider-google@0.0.0.jsii.tgz"
    with tarfile.open(path, "w:gz") as tarball:
        for name, data in (
            (".jsii", json.dumps(redirect).encode()),
            (".jsii.gz", gzip.compress(json.dumps(assembly).encode())),
        ):
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tarball.addfile(info, io.BytesIO(data))
    assert read_assembly(path) == assembly

"""The offline evaluator the structural checks stand on: pure logic, on small .tf files."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.evaluate import Evaluator, Unknown, instances
from deploy.evaluate import evaluator as evaluator_for
from deploy.hcl_syntax import EvalError
from deploy.terraform import Module

CONFIG = """
variable "project_id" {
  type        = string
  description = "p"
}

variable "settings" {
  type = object({
    enabled = optional(bool, true)
    size    = optional(number, 3)
    name    = optional(string)
  })
  description = "s"
  default     = {}
}

locals {
  items   = { a = { n = 1, tags = ["x"] }, b = { n = 2, tags = [] } }
  doubled = { for key, item in local.items : key => item.n * 2 if item.n > 1 }
  names   = [for key in keys(local.items) : "${var.project_id}-${replace(key, "a", "z")}"]
  chosen  = var.settings.enabled ? merge({ A = "1" }, { B = tostring(var.settings.size) }) : {}
  joined  = join(",", concat(["a"], var.settings.enabled ? ["b"] : []))
  later   = "serviceAccount:${google_service_account.x[var.project_id].email}"
}

resource "google_thing" "each" {
  for_each = local.items
  name     = "thing-${each.key}"
  dynamic "tag" {
    for_each = toset(each.value.tags)
    content {
      value = upper(tag.value)
    }
  }
}
"""


@pytest.fixture
def evaluator(tmp_path: Path) -> Evaluator:
    (tmp_path / "main.tf").write_text(CONFIG)
    return evaluator_for(Module.load(tmp_path), {"project_id": "proj"})


def test_variables_take_defaults_and_optional_attribute_defaults(evaluator: Evaluator) -> None:
    assert evaluator.variables["settings"] == {"enabled": True, "size": 3, "name": None}
    assert evaluator.variables["project_id"] == "proj"


def test_for_expressions_templates_and_functions(evaluator: Evaluator) -> None:
    assert evaluator.local("doubled") == {"b": 4}
    assert evaluator.local("names") == ["proj-z", "proj-b"]
    assert evaluator.local("chosen") == {"A": "1", "B": "3"}
    assert evaluator.local("joined") == "a,b"


def test_values_known_after_apply_stay_readable(evaluator: Evaluator) -> None:
    assert evaluator.local("later") == Unknown('serviceAccount:${google_service_account.x["proj"].email}')


def test_overrides_act_like_a_tfvars_file(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(CONFIG)
    evaluator = evaluator_for(Module.load(tmp_path), {"project_id": "p", "settings": {"enabled": False}})
    assert evaluator.local("chosen") == {}
    assert evaluator.local("joined") == "a"
    with pytest.raises(EvalError, match="undeclared"):
        evaluator_for(Module.load(tmp_path), {"project_id": "p", "nonsense": 1})


def test_instances_expand_for_each_and_dynamic_blocks(evaluator: Evaluator) -> None:
    planned = instances(evaluator, evaluator.module.resource("google_thing", "each"))
    assert planned == {
        "a": {"name": "thing-a", "tag": [{"value": "X"}]},
        "b": {"name": "thing-b", "tag": []},
    }


def test_an_unknown_local_is_an_error_not_a_guess(evaluator: Evaluator) -> None:
    with pytest.raises(EvalError, match="no local value"):
        evaluator.expression("local.missing")


VALIDATED = """
variable "ids" {
  type        = list(string)
  description = "i"
  default     = ["U1"]

  validation {
    condition     = alltrue([for id in var.ids : can(regex("^U[0-9]+$", id))])
    error_message = "ids must look like U123."
  }
}

variable "env" {
  type        = map(string)
  description = "e"
  default     = {}

  validation {
    condition = (
      length(setintersection(keys(var.env), ["SECRET"])) == 0 &&
      !anytrue([for k in keys(var.env) : endswith(k, "_HOST")])
    )
    error_message = "env must not set SECRET or *_HOST."
  }
}
"""


@pytest.mark.parametrize(
    ("values", "failures"),
    [
        ({}, []),
        ({"ids": ["U1", "bob"]}, ["var.ids: ids must look like U123."]),
        ({"env": {"SECRET": "x"}}, ["var.env: env must not set SECRET or *_HOST."]),
        ({"env": {"DB_HOST": "x"}}, ["var.env: env must not set SECRET or *_HOST."]),
        ({"env": {"OTHER": "x"}}, []),
    ],
)
def test_validations_are_evaluated_like_terraform(
    tmp_path: Path, values: dict[str, object], failures: list[str]
) -> None:
    (tmp_path / "variables.tf").write_text(VALIDATED)
    assert evaluator_for(Module.load(tmp_path), values).failed_validations() == failures


def test_can_is_unknown_when_its_argument_is(evaluator: Evaluator) -> None:
    assert evaluator.expression('can(regex("^a", "abc"))') is True
    assert evaluator.expression('can(regex("^b", "abc"))') is False
    assert isinstance(evaluator.expression("can(google_service_account.x.email)"), Unknown)


def test_no_module_of_deploy_imports_itself_back() -> None:
    """deploy/ has no import cycle (evaluate reads terraform's Module, never the reverse; tests/fast/test_layers.py
    pins that pair): each module's imports, followed all the way, never lead back to it."""
    import grimp

    graph = grimp.build_graph("deploy")
    cycles = {
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(imported, module) is not None
    }
    assert cycles == set()

"""The README's Deploy section: the seven steps in order, rollback and teardown, and nothing it names is made up."""

from __future__ import annotations

import re

from deploy.terraform import Module
from tests.deploy.conftest import ROOT

STEPS = [
    "1. Create a project",
    "2. Set the variables",
    "3. Build and apply",
    "4. Create the Slack app from the manifest",
    "5. Put the secrets in",
    "6. Invite the bot",
    "7. See the first answer",
]


def deploy_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Deploy\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_steps_come_in_order_then_rollback_and_teardown() -> None:
    headings = re.findall(r"^### (.+)$", deploy_section(), flags=re.MULTILINE)
    assert headings[: len(STEPS)] == STEPS
    rest = headings[len(STEPS) :]
    assert rest[:2] == ["Roll back", "Tear down"], rest


def test_every_make_target_it_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z.-]*):", makefile, flags=re.MULTILINE))
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", deploy_section()))
    assert named, "the Deploy section names no make target"
    assert named <= targets, f"the README names make targets the Makefile lacks: {sorted(named - targets)}"


def test_every_terraform_variable_it_names_exists(module: Module) -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \|", deploy_section(), flags=re.MULTILINE)
    assert rows, "expected the table of variables in step 2"
    assert set(rows) <= set(module.variables), (
        f"not in terraform/variables.tf: {sorted(set(rows) - set(module.variables))}"
    )

"""Fixtures of the deploy checks: the Terraform module, its evaluation, the provider schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.evaluate import Evaluator
from deploy.evaluate import evaluator as evaluator_for
from deploy.provider_schema import ProviderSchema, SchemaNotFound, load
from deploy.terraform import Module

ROOT = Path(__file__).resolve().parent.parent.parent
TERRAFORM = ROOT / "terraform"

# What a terraform.tfvars must give at least; the rest are the variables' defaults.
TFVARS: dict[str, Any] = {"project_id": "example-project"}


@pytest.fixture(scope="session")
def module() -> Module:
    return Module.load(TERRAFORM)


@pytest.fixture(scope="session", params=[True, False], ids=["vertex-ai", "api-key"])
def evaluator(request: pytest.FixtureRequest, module: Module) -> Evaluator:
    """The configuration as planned with Gemini through Vertex AI, and with an API key."""
    return evaluator_for(module, {**TFVARS, "gemini": {"use_vertex_ai": request.param}})


@pytest.fixture(scope="session")
def provider_schema() -> ProviderSchema:
    try:
        return load()
    except SchemaNotFound as exc:
        pytest.fail(str(exc))

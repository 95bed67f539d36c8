"""Structural checks: terraform/ against the code it deploys, evaluated offline.

Every check reads the code's own declarations (the entry points in
functions/main.py, shared/config.py's VARIABLES and required_for, shared/store.py's
INDEXES) so that a variable, an entry point or a query added later is guarded too.
Each runs twice: with Gemini through Vertex AI and with an API key.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import package
from deploy.evaluate import Evaluator, Unknown, instances
from deploy.terraform import Block, Module, body_items
from shared import config, store
from tests.deploy.conftest import ROOT, TERRAFORM, TFVARS

FUNCTION = ("google_cloudfunctions2_function", "this")
MAX_DISPATCH_DEADLINE = 1800  # Cloud Tasks' limit for HTTP targets, in seconds


@dataclass(frozen=True)
class Deployed:
    """One function as Terraform would create it."""

    key: str
    settings: dict[str, Any]  # its entry in local.functions
    body: dict[str, Any]  # the planned resource

    @property
    def service(self) -> dict[str, Any]:
        service: dict[str, Any] = self.body["service_config"][0]
        return service

    @property
    def environment(self) -> dict[str, Any]:
        environment: dict[str, Any] = self.service.get("environment_variables", {})
        return environment

    @property
    def secrets(self) -> dict[str, Any]:
        """Secret environment variable -> the secret it comes from."""
        return {item["key"]: item["secret"] for item in self.service.get("secret_environment_variables", [])}

    @property
    def identity(self) -> Unknown:
        return Unknown(f'google_service_account.function["{self.key}"].email')


def deployed(module: Module, evaluator: Evaluator) -> dict[str, Deployed]:
    settings = evaluator.local("functions")
    planned = instances(evaluator, module.resource(*FUNCTION))
    return {key: Deployed(key, settings[key], body) for key, body in planned.items()}


def planned(module: Module, evaluator: Evaluator, resource_type: str, name: str) -> dict[str, dict[str, Any]]:
    return instances(evaluator, module.resource(resource_type, name))


def entry_points_in_main() -> set[str]:
    """The functions in functions/main.py decorated with @functions_framework.http."""
    tree = ast.parse((ROOT / "functions" / "main.py").read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("functions_framework" in ast.unparse(d) for d in node.decorator_list)
    }


# --- 1. Layout ----------------------------------------------------------------------------------------------------


def test_files_are_split_by_concern() -> None:
    names = {path.name for path in TERRAFORM.glob("*.tf")}
    assert {"versions.tf", "variables.tf", "outputs.tf", "main.tf"} <= names
    assert len(names) >= 6, f"resources should be split into files by concern, found only {sorted(names)}"
    assert (TERRAFORM / "terraform.tfvars.example").is_file()


def test_versions_pin_the_google_provider(module: Module) -> None:
    (settings,) = module.of_kind("terraform")
    (providers,) = settings.body["required_providers"]
    google = providers["google"]
    assert google["source"] == '"hashicorp/google"'
    assert re.fullmatch(r'"~> \d+\.\d+"', google["version"]), "pin the google provider to a minor-version range"
    assert "required_version" in settings.body
    assert set(providers) - {"google", "__is_block__"} == set(), "every provider used must be pinned here"


def test_every_variable_is_typed_and_described_project_and_region_first(module: Module) -> None:
    variables = [block for block in module.of_kind("variable") if block.file.name == "variables.tf"]
    assert [block.labels[0] for block in variables[:2]] == ["project_id", "region"]
    assert len(variables) == len(module.of_kind("variable")), "declare every variable in variables.tf"
    for block in variables:
        assert "type" in block.body, f"variable {block.labels[0]} has no type"
        assert str(block.body.get("description", "")).strip('"'), f"variable {block.labels[0]} has no description"


def test_outputs_give_what_the_slack_app_needs(module: Module) -> None:
    outputs = {block.labels[0]: block for block in module.of_kind("output")}
    assert {"events_url", "interactivity_url", "function_names"} <= set(outputs)
    for name, block in outputs.items():
        assert str(block.body.get("description", "")).strip('"'), f"output {name} has no description"


def test_outputs_point_at_the_slack_functions(module: Module, evaluator: Evaluator) -> None:
    outputs = {block.labels[0]: dict(body_items(block.body)) for block in module.of_kind("output")}
    events = evaluator.value(outputs["events_url"]["value"])
    interactivity = evaluator.value(outputs["interactivity_url"]["value"])
    assert events == Unknown(f'google_cloudfunctions2_function.this["{config.SLACK_EVENTS}"].url')
    expected = (
        config.SLACK_INTERACTIVITY
        if config.SLACK_INTERACTIVITY in evaluator.local("functions")
        else config.SLACK_EVENTS
    )
    assert interactivity == Unknown(f'google_cloudfunctions2_function.this["{expected}"].url')


# --- 2. Entry points and their environment --------------------------------------------------------------------------


def test_every_entry_point_is_deployed(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    in_main = entry_points_in_main()
    assert in_main, "found no @functions_framework.http entry points in functions/main.py"
    assert set(functions) == in_main, "local.functions and functions/main.py must list the same entry points"
    assert set(functions) <= set(config.ENTRY_POINTS)
    for key, function in functions.items():
        assert function.body["build_config"][0]["entry_point"] == key


def test_runtime_is_python312_or_newer(module: Module, evaluator: Evaluator) -> None:
    for function in deployed(module, evaluator).values():
        runtime = function.body["build_config"][0]["runtime"]
        version = re.fullmatch(r"python3(\d+)", runtime)
        assert version, runtime
        assert int(version.group(1)) >= 12, runtime


def missing_required_variables(functions: dict[str, Deployed]) -> dict[str, list[str]]:
    """Per function, the variables shared/config.py requires for its entry point that Terraform does not set."""
    missing: dict[str, list[str]] = {}
    for key, function in functions.items():
        given = set(function.environment) | set(function.secrets)
        lacking = [variable.name for variable in config.required_for(key) if variable.name not in given]
        if lacking:
            missing[key] = lacking
    return missing


def test_every_required_variable_reaches_the_functions_that_need_it(module: Module, evaluator: Evaluator) -> None:
    assert missing_required_variables(deployed(module, evaluator)) == {}


def test_a_dropped_variable_is_caught(tmp_path: Path) -> None:
    """The check above fails when a function loses a required variable (a check that cannot fail checks nothing)."""
    for path in TERRAFORM.glob("*.tf"):
        (tmp_path / path.name).write_text(path.read_text())
    main = tmp_path / "main.tf"
    text = main.read_text()
    assert "TASKS_QUEUE " in text
    assert '"SLACK_SIGNING_SECRET", ' in text
    text = re.sub(r"\n\s*TASKS_QUEUE\s*=.*", "", text)
    main.write_text(
        text.replace('secrets     = ["SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"]', 'secrets = ["SLACK_BOT_TOKEN"]', 1)
    )
    broken = Module.load(tmp_path)
    missing = missing_required_variables(deployed(broken, broken.evaluator(TFVARS)))
    assert missing[config.SLACK_EVENTS] == ["SLACK_SIGNING_SECRET", "TASKS_QUEUE"]
    assert all("TASKS_QUEUE" in names for names in missing.values())


def test_every_variable_set_is_declared_for_that_entry_point(module: Module, evaluator: Evaluator) -> None:
    declared = {variable.name: variable for variable in config.VARIABLES}
    for key, function in deployed(module, evaluator).items():
        for name in set(function.environment) | set(function.secrets):
            assert name in declared, f"{key} sets {name}, which shared/config.py does not declare"
            assert key in declared[name].used_by, f"{key} sets {name}, which {key} does not read"


def test_secrets_come_from_secret_manager_only(module: Module, evaluator: Evaluator) -> None:
    secret = {variable.name for variable in config.VARIABLES if variable.secret}
    for key, function in deployed(module, evaluator).items():
        assert not secret & set(function.environment), f"{key} has a secret in plain environment variables"
        assert set(function.secrets) <= secret, f"{key} takes a non-secret from Secret Manager"
        for name, source in function.secrets.items():
            assert source == Unknown(f'google_secret_manager_secret.this["{name}"].secret_id')
        assert all(item["version"] == "latest" for item in function.service["secret_environment_variables"])


def test_emulators_and_local_switches_stay_off_in_the_cloud(module: Module, evaluator: Evaluator) -> None:
    for key, function in deployed(module, evaluator).items():
        emulators = [name for name in function.environment if name.endswith("_EMULATOR_HOST")]
        assert not emulators, f"{key} must not point at an emulator: {emulators}"
        assert "GOOGLE_GEMINI_BASE_URL" not in function.environment
        assert str(function.environment.get("REQUIRE_OIDC", "true")).lower() == "true"
        assert "SLACK_API_BASE_URL" not in function.environment, "the cloud talks to the real Slack"


def test_gemini_is_reached_one_way(module: Module, evaluator: Evaluator) -> None:
    vertex = evaluator.variables["gemini"]["use_vertex_ai"]
    for key, function in deployed(module, evaluator).items():
        uses_model = bool(function.settings["calls_model"])
        assert ("GEMINI_API_KEY" in function.secrets) == (uses_model and not vertex), key
        assert (function.environment.get("GOOGLE_GENAI_USE_VERTEXAI") == "true") == (uses_model and vertex), key
        if uses_model and vertex:
            assert function.environment.get("GOOGLE_CLOUD_LOCATION")
            assert function.environment.get("GOOGLE_CLOUD_PROJECT")
    assert ("GEMINI_API_KEY" in evaluator.local("secrets")) == (not vertex)


def test_only_the_functions_that_call_the_model_are_marked_so(module: Module, evaluator: Evaluator) -> None:
    model_variables = {"GEMINI_MODEL", "GEMINI_API_KEY"}
    readers = {entry for variable in config.VARIABLES if variable.name in model_variables for entry in variable.used_by}
    for key, function in deployed(module, evaluator).items():
        assert bool(function.settings["calls_model"]) == (key in readers), key


# --- 3. Firestore ---------------------------------------------------------------------------------------------------


def _index(body: dict[str, Any]) -> store.Index:
    fields = tuple((field["field_path"], field["order"]) for field in body["fields"])
    return store.Index(body["collection"], fields)


def test_every_query_has_its_composite_index(module: Module, evaluator: Evaluator) -> None:
    declared: list[store.Index] = []
    for block in module.resources("google_firestore_index"):
        for body in instances(evaluator, block).values():
            assert body["database"] == Unknown("google_firestore_database.main.name")
            assert body.get("query_scope", "COLLECTION") == "COLLECTION"
            declared.append(_index(body))
    missing = set(store.INDEXES) - set(declared)
    unused = set(declared) - set(store.INDEXES)
    assert not missing, f"queries in shared/store.py lack composite indexes in Terraform: {missing}"
    assert not unused, f"Terraform declares indexes no query in shared/store.py needs: {unused}"
    assert len(declared) == len(set(declared)), "an index is declared twice"


def test_event_records_expire_by_ttl(module: Module, evaluator: Evaluator) -> None:
    ttl = [
        body
        for block in module.resources("google_firestore_field")
        for body in instances(evaluator, block).values()
        if body.get("ttl_config")
    ]
    assert [(body["collection"], body["field"]) for body in ttl] == [(store.EVENTS, store.EVENT_EXPIRES_FIELD)]
    assert ttl[0]["database"] == Unknown("google_firestore_database.main.name")


def test_firestore_is_native_mode_and_protected(module: Module, evaluator: Evaluator) -> None:
    (database,) = planned(module, evaluator, "google_firestore_database", "main").values()
    assert database["type"] == "FIRESTORE_NATIVE"
    assert database["delete_protection_state"] == "DELETE_PROTECTION_ENABLED"
    defaults = {variable.name: variable.default for variable in config.VARIABLES}
    assert database["name"] == defaults["FIRESTORE_DATABASE"]


# --- 4. Cloud Tasks -------------------------------------------------------------------------------------------------


def test_the_queue_has_explicit_retries_and_rate_limits(module: Module, evaluator: Evaluator) -> None:
    (queue,) = planned(module, evaluator, "google_cloud_tasks_queue", "sessions").values()
    assert queue["name"] == "agent-sessions"
    (retry,) = queue["retry_config"]
    assert {"max_attempts", "max_retry_duration", "min_backoff", "max_backoff", "max_doublings"} <= set(retry)
    (rates,) = queue["rate_limits"]
    assert {"max_dispatches_per_second", "max_concurrent_dispatches"} <= set(rates)


def test_tasks_go_to_agent_session_as_its_invoker(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    urls = evaluator.local("function_urls")
    invokers = planned(module, evaluator, "google_cloud_run_service_iam_member", "private")
    tasks_invoker = Unknown("google_service_account.tasks_invoker.email")
    assert invokers["agent_session"]["member"] == Unknown(f"serviceAccount:${{{tasks_invoker}}}")
    assert invokers["agent_session"]["role"] == "roles/run.invoker"
    for key, function in functions.items():
        environment = function.environment
        assert environment["TASKS_TARGET_URL"] == urls["agent_session"], key
        assert environment["TASKS_SERVICE_ACCOUNT"] == tasks_invoker, key
        assert environment["TASKS_QUEUE"] == Unknown("google_cloud_tasks_queue.sessions.id"), key
    # The URL given to TASKS_TARGET_URL is checked against the real one when the function is created.
    (postcondition,) = functions["agent_session"].body["lifecycle"][0]["postcondition"]
    assert postcondition["condition"] == Unknown("self.url == local.function_urls[each.key]")
    assert urls["agent_session"].endswith("/" + functions["agent_session"].body["name"])


def test_timeouts_fit_the_dispatch_deadline(module: Module, evaluator: Evaluator) -> None:
    agent = deployed(module, evaluator)["agent_session"]
    deadline = int(agent.environment["TASKS_DISPATCH_DEADLINE_SECONDS"])
    timeout = agent.service["timeout_seconds"]
    assert deadline <= timeout <= MAX_DISPATCH_DEADLINE, "agent_session must outlive the dispatch deadline"
    defaults = {variable.name: variable.default for variable in config.VARIABLES}
    assert str(deadline) == defaults["TASKS_DISPATCH_DEADLINE_SECONDS"], "Terraform and config.py disagree"
    wall = agent.environment.get("SESSION_WALL_SECONDS", defaults.get("SESSION_WALL_SECONDS"))
    if wall is not None:
        assert int(wall) < deadline, "the session's wall budget must end before Cloud Tasks gives up"


def test_the_tasks_invoker_variable_validation_matches_cloud_tasks(module: Module) -> None:
    validation = module.variables["tasks"].body["validation"][0]["condition"]
    assert ">= 15" in validation
    assert f"<= {MAX_DISPATCH_DEADLINE}" in validation


# --- 5. Cloud Scheduler ---------------------------------------------------------------------------------------------


def test_the_scheduler_calls_sweep_with_oidc(module: Module, evaluator: Evaluator) -> None:
    (job,) = planned(module, evaluator, "google_cloud_scheduler_job", "sweep").values()
    (target,) = job["http_target"]
    assert target["uri"] == Unknown('google_cloudfunctions2_function.this["sweep"].url')
    (token,) = target["oidc_token"]
    scheduler = Unknown("google_service_account.scheduler.email")
    assert token["service_account_email"] == scheduler
    sweep = deployed(module, evaluator)["sweep"]
    assert token["audience"] == evaluator.local("function_urls")["sweep"] == sweep.environment["OIDC_AUDIENCE"]
    assert sweep.environment["SCHEDULER_SERVICE_ACCOUNT"] == scheduler
    invokers = planned(module, evaluator, "google_cloud_run_service_iam_member", "private")
    assert invokers["sweep"]["member"] == Unknown(f"serviceAccount:${{{scheduler}}}")
    assert int(job["attempt_deadline"].removesuffix("s")) <= sweep.service["timeout_seconds"]


# --- 6. Identities and access ---------------------------------------------------------------------------------------


def test_one_service_account_per_function(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    accounts = planned(module, evaluator, "google_service_account", "function")
    assert set(accounts) == set(functions)
    ids = [account["account_id"] for account in accounts.values()]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account_id) for account_id in ids), ids
    for function in functions.values():
        assert function.service["service_account_email"] == function.identity


def test_invokers_are_public_only_for_the_slack_endpoints(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    public = planned(module, evaluator, "google_cloud_run_service_iam_member", "public")
    private = planned(module, evaluator, "google_cloud_run_service_iam_member", "private")
    slack_facing = {config.SLACK_EVENTS, config.SLACK_INTERACTIVITY} & set(functions)
    assert set(public) == slack_facing
    assert set(private) == set(functions) - slack_facing
    for key, binding in {**public, **private}.items():
        assert binding["role"] == "roles/run.invoker"
        assert binding["service"] == Unknown(f'google_cloudfunctions2_function.this["{key}"].service_config[0].service')
    assert all(binding["member"] == "allUsers" for binding in public.values())


def _bindings(module: Module, evaluator: Evaluator) -> list[tuple[Block, dict[str, Any]]]:
    return [
        (block, body)
        for block in module.of_kind("resource")
        if block.labels[0].endswith("_iam_member")
        for body in instances(evaluator, block).values()
    ]


def test_nothing_else_is_public(module: Module, evaluator: Evaluator) -> None:
    for block, body in _bindings(module, evaluator):
        if block.address != "google_cloud_run_service_iam_member.public":
            assert body["member"] not in {"allUsers", "allAuthenticatedUsers"}, block.address


def test_each_function_gets_only_what_it_does(module: Module, evaluator: Evaluator) -> None:
    functions = deployed(module, evaluator)
    vertex = evaluator.variables["gemini"]["use_vertex_ai"]
    granted: set[tuple[str, str, str]] = set()  # (function, role, on what)
    for block, body in _bindings(module, evaluator):
        for key, function in functions.items():
            if body["member"] == Unknown(f"serviceAccount:${{{function.identity}}}"):
                target = block.labels[0].removesuffix("_iam_member")
                on = str(body.get("secret_id") or body.get("service_account_id") or body.get("name") or "")
                granted.add((key, body["role"], f"{target}:{on}"))
    expected: set[tuple[str, str, str]] = set()
    for key, function in functions.items():
        expected |= {
            (key, "roles/datastore.user", "google_project:"),
            (key, "roles/cloudtasks.enqueuer", "google_cloud_tasks_queue:google_cloud_tasks_queue.sessions.name"),
            (key, "roles/iam.serviceAccountUser", "google_service_account:google_service_account.tasks_invoker.name"),
        }
        expected |= {
            (key, "roles/secretmanager.secretAccessor", f"google_secret_manager_secret:{source}")
            for source in function.secrets.values()
        }
        if function.settings["calls_model"] and vertex:
            expected.add((key, "roles/aiplatform.user", "google_project:"))
    assert granted == expected


# --- 7. The source ---------------------------------------------------------------------------------------------------


def test_the_source_object_is_named_by_content_hash(module: Module, evaluator: Evaluator) -> None:
    (obj,) = planned(module, evaluator, "google_storage_bucket_object", "source").values()
    assert obj["name"] == Unknown("function-source/${filesha256(local.source_archive)}.zip")
    assert obj["source"] == Unknown("local.source_archive") or "source_archive" in str(obj["source"])
    default_archive = module.locals["source_archive"]
    assert f"/../build/{package.ARCHIVE_NAME}" in default_archive, "Terraform must upload what `make package` builds"
    for function in deployed(module, evaluator).values():
        (source,) = function.body["build_config"][0]["source"]
        assert source["storage_source"][0]["object"] == Unknown("google_storage_bucket_object.source.name")


# --- 8. Checkov skips -------------------------------------------------------------------------------------------------


def test_every_checkov_skip_carries_a_reason() -> None:
    skips = 0
    for path in sorted(TERRAFORM.glob("*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if "checkov:skip" not in line:
                continue
            skips += 1
            match = re.search(r"#\s*checkov:skip=(CKV2?_[A-Z0-9]+_\d+):(.+)$", line)
            assert match, f"{path.name}:{number}: malformed checkov skip"
            assert len(match.group(2).split()) >= 8, f"{path.name}:{number}: say why {match.group(1)} does not apply"
    assert skips, "expected the documented skips (public Slack endpoints)"

"""The shape of shared/: the import contracts stay complete as the code grows, and no module grows past 500 lines."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "shared"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_module_that_imports_google_genai_is_forbidden_to_the_ingress() -> None:
    """import-linter only sees "google", so its contract forbids the package that must hold every module importing
    google-genai (``shared.agent``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [contract] = [c for c in config if c["type"] == "forbidden" and "google-genai" in c["name"]]
    forbidden = contract["forbidden_modules"]
    genai = [
        _module(path)
        for path in sorted(SHARED.rglob("*.py"))
        if any(name == "google.genai" or name.startswith("google.genai.") for name in _imports(path))
    ]
    assert genai, "expected the agent modules to import google-genai"
    uncovered = [m for m in genai if not any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert uncovered == [], f"add these to the ingress contract in pyproject.toml: {uncovered}"


def test_every_package_says_what_it_holds_and_no_module_is_over_500_lines() -> None:
    for init in [
        *SHARED.rglob("__init__.py"),
        *(ROOT / "ops").rglob("__init__.py"),
        *(ROOT / "infra").rglob("__init__.py"),
    ]:
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} needs a docstring"
    long = {str(p.relative_to(ROOT)): n for p in SHARED.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, f"split these modules: {long}"


def test_deploy_has_no_import_cycle() -> None:
    """deploy/terraform.py (reading the module) sits below deploy/evaluate.py (evaluating it), never the reverse."""
    import grimp

    graph = grimp.build_graph("deploy")
    assert graph.find_shortest_chain("deploy.terraform", "deploy.evaluate") is None


def test_every_product_error_is_a_product_error_with_a_name_of_its_own() -> None:
    """A caller tells a known refusal from a bug by ``ProductError``; two classes of one name would be told apart
    by their module only."""
    import importlib
    import inspect
    import pkgutil

    import shared
    from shared.errors import ProductError

    defined: dict[str, list[str]] = {}
    outside: list[str] = []
    for info in pkgutil.walk_packages(shared.__path__, "shared."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                defined.setdefault(name, []).append(info.name)
                if not issubclass(value, ProductError):
                    outside.append(f"{info.name}.{name}")
    assert outside == [], f"derive these from shared.errors.ProductError (or a subclass): {outside}"
    clashes = {name: modules for name, modules in defined.items() if len(modules) > 1}
    assert clashes == {}, f"exception names defined more than once: {clashes}"


def test_no_class_takes_an_exceptions_name() -> None:
    """No class of shared/, ops/ or infra/ shares its name with an exception class of theirs (a record named
    ``Refused`` beside ``shared.errors.Refused``, two fakes' ``ControlError``): a name read in a traceback or an
    ``except`` means one thing."""
    import importlib
    import inspect
    import pkgutil

    import infra
    import ops
    import shared

    classes: dict[str, list[str]] = {}
    errors: set[str] = set()
    for package in (shared, ops, infra):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith(".__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and value.__module__ == info.name:
                    classes.setdefault(name, []).append(info.name)
                    if issubclass(value, BaseException):
                        errors.add(name)
    clashes = {name: modules for name, modules in classes.items() if name in errors and len(modules) > 1}
    assert clashes == {}, f"rename these classes: {clashes}"

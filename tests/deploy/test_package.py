"""The deployable source: what deploys is what was tested.

The zip `make package` builds is unpacked into an empty directory with a fresh
virtual environment holding only requirements.txt. Every entry point Terraform
deploys is then served from there with functions-framework, as Cloud Functions
would: the imports succeed, and a signed url_verification is answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from deploy import package
from deploy.evaluate import evaluator as evaluator_for
from deploy.terraform import Module
from infra.procs import Proc, free_port, http_answers, wait_until
from infra.signing import signed_headers
from tests.deploy.conftest import ROOT, TFVARS

SIGNING_SECRET = "deploy-test-signing-secret"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> package.Package:
    return package.build(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def unpacked(built: package.Package, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the unpacked source, the python of a fresh venv with only requirements.txt installed)."""
    app = tmp_path_factory.mktemp("app")
    assert not any(app.iterdir())
    with zipfile.ZipFile(built.path) as archive:
        archive.extractall(app)
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, f"pip install -r requirements.txt failed:\n{result.stderr[-3000:]}"
    return app, python


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    """Only what the functions need: nothing from this process (emulator hosts, credentials) leaks in."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **extra}


def entry_points() -> list[str]:
    module = Module.load(ROOT / "terraform")
    return sorted(evaluator_for(module, TFVARS).local("functions"))


def test_the_zip_is_reproducible_and_holds_exactly_the_source(built: package.Package, tmp_path: Path) -> None:
    again = package.build(tmp_path)
    assert again.sha256 == built.sha256, "the same tree must give the same zip (its hash names the deployed object)"
    expected = {"main.py", "requirements.txt"} | {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "shared").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}
    }
    with zipfile.ZipFile(built.path) as archive:
        assert set(archive.namelist()) == expected
        assert archive.read("main.py") == (ROOT / "functions" / "main.py").read_bytes()
        assert archive.read("requirements.txt") == (ROOT / "requirements.txt").read_bytes()


def test_a_code_change_changes_the_hash(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in ("functions/main.py", "requirements.txt", "shared/__init__.py"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes((ROOT / name).read_bytes())
    first = package.build(tmp_path / "a", root=tree)
    (tree / "shared" / "__init__.py").write_text('"""changed"""\n')
    second = package.build(tmp_path / "b", root=tree)
    assert first.sha256 != second.sha256


@pytest.mark.timeout(600)  # its fixture installs the runtime requirements into a fresh venv: minutes on a busy machine
def test_every_module_imports_with_only_the_runtime_requirements(unpacked: tuple[Path, Path], tmp_path: Path) -> None:
    app, python = unpacked
    script = (
        "import importlib, pkgutil, main, shared\n"
        "names = [m.name for m in pkgutil.walk_packages(shared.__path__, 'shared.')]\n"
        "[importlib.import_module(name) for name in names]\n"
        "print(len(names))\n"
    )
    result = subprocess.run(
        [str(python), "-c", script],
        cwd=app,
        env=bare_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.strip()) >= 1


def request(url: str, *, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    method = "POST" if body is not None else "GET"
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)  # noqa: S310 - loopback
    try:
        with urllib.request.urlopen(req, timeout=30) as response:  # noqa: S310 - loopback URL of a test server
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("entry_point", entry_points())
def test_every_entry_point_serves_from_the_unpacked_zip(
    unpacked: tuple[Path, Path], entry_point: str, tmp_path: Path
) -> None:
    app, python = unpacked
    port = free_port()
    server = Proc(
        name=f"functions-framework {entry_point}",
        argv=[
            str(python),
            "-m",
            "functions_framework",
            "--source",
            "main.py",
            "--target",
            entry_point,
            "--port",
            str(port),
        ],
        log_path=tmp_path / f"{entry_point}.log",
        env=bare_env(tmp_path, SLACK_SIGNING_SECRET=SIGNING_SECRET),
        cwd=app,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        server.start()
        wait_until(lambda: http_answers(url), proc=server, what=f"serving {entry_point}", timeout=60)
        # A GET runs the handler's own (lazy) imports before it answers; an import error would be a 500.
        status, _ = request(url)
        assert status < 500 or status == 501, f"{entry_point} answered {status}:\n{server.log_tail()}"
        if entry_point == "slack_events":
            body = json.dumps({"type": "url_verification", "token": "t", "challenge": "c-123"}).encode()
            status, reply = request(url, body=body, headers=signed_headers(SIGNING_SECRET, body))
            assert (status, json.loads(reply)) == (200, {"challenge": "c-123"}), server.log_tail()
            status, _ = request(url, body=body, headers=signed_headers("another-secret", body))
            assert status == 401, "an unsigned url_verification must be refused"
        assert "Traceback" not in server.log_path.read_text(errors="replace"), server.log_tail()
    finally:
        server.stop()
    assert not server.alive()

"""An entry point of ``functions/main.py`` as functions-framework serves it, in-process: its app's test client."""

from __future__ import annotations

from pathlib import Path

import flask.testing

MAIN = Path(__file__).resolve().parents[1] / "functions" / "main.py"


def function_client(entry_point: str) -> flask.testing.FlaskClient:
    """A test client of ``entry_point``'s app (functions-framework imported here: a test that needs none is spared
    its import)."""
    import functions_framework

    app: flask.Flask = functions_framework.create_app(target=entry_point, source=str(MAIN))  # type: ignore[no-untyped-call]
    return app.test_client()

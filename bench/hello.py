"""The bare function cold start is compared with: functions-framework serving a hello world."""

from __future__ import annotations

import flask
import functions_framework


@functions_framework.http
def hello(request: flask.Request) -> tuple[str, int]:
    return "hello", 200

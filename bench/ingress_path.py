"""One cold ingress, timed from inside a fresh interpreter: ``python -X importtime -m bench.ingress_path``.

It loads ``functions/main.py`` the way functions-framework does, answers one signed
app_mention (read from stdin as ``{"body": ..., "headers": ...}``, signed by the
caller so that signing imports nothing here) through the function's Flask app,
and prints one JSON line: how long
each stage took, how many modules were loaded, and whether google-genai was among
them (it must not be: the model runs in agent_session, never on the ingress path).
The environment must point at a running stack (the benchmark passes its own).
"""

from __future__ import annotations

import json
import os
import sys
import time

START = time.perf_counter()
MARKER = "--- bench.ingress_path ---"
MAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "functions", "main.py")


def main() -> None:
    request = json.loads(sys.stdin.read())
    import functions_framework

    framework = time.perf_counter()
    app = functions_framework.create_app(target="slack_events", source=MAIN)  # type: ignore[no-untyped-call]
    loaded = time.perf_counter()
    before = set(sys.modules)
    # What the handler imports on its first call, split from the rest of that call; the marker splits
    # -X importtime's output (on stderr) the same way.
    print(MARKER, file=sys.stderr, flush=True)
    from shared.handlers import slack_events as ingress

    imported = time.perf_counter()
    print(MARKER, file=sys.stderr, flush=True)
    response = app.test_client().post("/", data=request["body"].encode(), headers=request["headers"])
    answered = time.perf_counter()
    lazy = sorted(set(sys.modules) - before)
    print(
        json.dumps(
            {
                "status": response.status_code,
                "framework_ms": (framework - START) * 1000,
                "main_ms": (loaded - framework) * 1000,
                "ingress_imports_ms": (imported - loaded) * 1000,
                "first_request_ms": (answered - imported) * 1000,
                "modules": len(sys.modules),
                "modules_loaded_by_first_request": len(lazy),
                "ingress_module": ingress.__name__,
                "genai_loaded": any(m == "google.genai" or m.startswith("google.genai.") for m in sys.modules),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

"""``make dev``: the whole local stack, and a terminal chat with the bot as a Slack user.

With ``GEMINI_API_KEY`` (or ``GOOGLE_GENAI_USE_VERTEXAI=true`` and credentials) in
the environment, the agent uses the real Gemini model. Without them it says so and
uses the demo model: a scripted offline stand-in that labels every reply
``[demo model]``, so the flow (mention, question, answer, continuation) can be
tried offline without anything pretending to be Gemini.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from pathlib import Path

from infra import chat
from infra.procs import StackError
from infra.stack import OPERATOR_ID, STACK_FILE, exit_cleanly_on_signals, running

CHAT_USER = "U0HUMAN"
# You play both the requester and an operator, so you can answer the bot's questions yourself.
OPERATORS = {"OPERATOR_USER_IDS": f"{OPERATOR_ID},{CHAT_USER}"}


def has_real_model() -> bool:
    vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in {"1", "true", "yes"}
    return bool(os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or vertex)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.dev", description=__doc__.splitlines()[0])
    parser.add_argument("--stack-file", type=Path, default=STACK_FILE, help="where the stack records URLs and pids")
    args = parser.parse_args(argv)
    exit_cleanly_on_signals()
    real = has_real_model()
    if real:
        print("Using the real Gemini model (GEMINI_API_KEY or Vertex AI found in the environment).")
    else:
        print(
            "No GEMINI_API_KEY and no Vertex AI settings: using the DEMO MODEL, a scripted offline stand-in.\n"
            "Every reply it writes starts with [demo model]. It is not Gemini. Set GEMINI_API_KEY for the real one."
        )
    print("Starting the local stack (Firestore emulator, Cloud Tasks emulator, fake Slack, functions)...", flush=True)
    try:
        with running(demo_model=not real, real_model=real, extra_env=OPERATORS, stack_file=args.stack_file) as stack:
            page = stack.url("fake_slack") + "/"
            print(f"\nThe workspace: {page}   (open it in a browser; the console is {page}#console)\n", flush=True)
            if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
                webbrowser.open(page)
            print(f"Stack is up; logs in {stack.logs_dir}. Leaving the chat stops it.", flush=True)
            return chat.main(["--stack-file", str(stack.stack_file), "--user", CHAT_USER])
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

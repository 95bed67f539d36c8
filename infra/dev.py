"""``make dev``: the whole local stack, its workspace page, and a terminal chat with the bot as a Slack user.

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

from infra import chat, guard
from infra.procs import StackError
from infra.stack import CHAT_USER, exit_cleanly_on_signals, for_people, running
from ops.local_stack import STACK_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.dev", description=__doc__.splitlines()[0])
    parser.add_argument("--stack-file", type=Path, default=STACK_FILE, help="where the stack records URLs and pids")
    args = parser.parse_args(argv)
    guard.guarded(args.stack_file)  # from here on, a kill -9 of this process or of make leaves a sane terminal
    exit_cleanly_on_signals()
    options = for_people()
    if options["real_model"]:
        print("Using the real Gemini model (GEMINI_API_KEY or Vertex AI found in the environment).")
    else:
        print(
            "No GEMINI_API_KEY and no Vertex AI settings: using the DEMO MODEL, a scripted offline stand-in.\n"
            "Every reply it writes starts with [demo model]. It is not Gemini. Set GEMINI_API_KEY for the real one."
        )
    print("Starting the local stack (Firestore emulator, Cloud Tasks emulator, fake Slack, functions)...", flush=True)
    try:
        with running(stack_file=args.stack_file, **options) as stack:
            page = stack.url("fake_slack") + "/"
            print(f"\nThe workspace: {page}   (open it in a browser; its Console tab is for operators)\n", flush=True)
            if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
                webbrowser.open(page)
            print(f"Stack is up; logs in {stack.logs_dir}. Leaving the chat stops it.", flush=True)
            try:
                return chat.main(["--stack-file", str(stack.stack_file), "--user", CHAT_USER])
            finally:
                print(f"Stopping the local stack: {', '.join(stack.procs)}...", flush=True)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Fill the Slack app manifest's request URLs in from ``terraform output -json``.

``slack/manifest.yaml`` declares the app (scopes, events, interactivity, bot
user, Slack's agent messaging experience) with placeholder URLs; this writes a
copy with the deployed function URLs (``events_url``, ``interactivity_url``)
and the suggested prompts (``assistant_prompts``, the same list ``slack_events``
sets when someone opens the app), ready to paste into Slack's "Create New App
-> From an app manifest". The scopes and events are the template's. It needs
only the outputs as JSON, so it works offline from a saved file:

    terraform -chdir=terraform output -json > build/terraform-outputs.json
    python -m deploy.manifest --outputs build/terraform-outputs.json --out build/slack-manifest.yaml

The template targets the agent messaging experience (``agent_view``, Slack's
default for new apps). ``--surface assistant`` writes the older assistant pane
(``assistant_view``) for a workspace whose app still uses it: the feature and
its description renamed, the ``assistant_thread_*`` events in place of
``app_home_opened`` / ``app_context_changed``. The code handles both families.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "slack" / "manifest.yaml"

# Where each Terraform output goes in the manifest.
URL_OUTPUTS: dict[str, tuple[str, ...]] = {
    "events_url": ("settings", "event_subscriptions", "request_url"),
    "interactivity_url": ("settings", "interactivity", "request_url"),
}
PROMPTS_OUTPUT = "assistant_prompts"  # -> features.<agent_view|assistant_view>.suggested_prompts
SURFACES = ("agent", "assistant")
# The assistant pane's events, and the agent messaging experience's that stand for them.
ASSISTANT_EVENTS = {
    "app_home_opened": "assistant_thread_started",
    "app_context_changed": "assistant_thread_context_changed",
}
MAX_PROMPTS = 4  # Slack shows at most four


class ManifestError(ValueError):
    """The outputs lack a URL the manifest needs, or it is not an https URL."""


def output_values(outputs: dict[str, Any]) -> dict[str, Any]:
    """``terraform output -json`` wraps each value as {"value": ..., "type": ..., "sensitive": ...}."""
    return {
        name: item["value"] if isinstance(item, dict) and "value" in item else item for name, item in outputs.items()
    }


def fill(manifest: dict[str, Any], outputs: dict[str, Any], *, surface: str = "agent") -> dict[str, Any]:
    """A copy of ``manifest`` with every request URL set from ``outputs``, for Slack's agent messaging experience
    or (``surface="assistant"``) the assistant pane."""
    values = output_values(outputs)
    filled: dict[str, Any] = json.loads(json.dumps(manifest))  # a deep copy of plain data
    if surface not in SURFACES:
        raise ManifestError(f"surface must be one of {SURFACES}, got {surface!r}")
    if surface == "assistant":
        _to_assistant_view(filled)
    for output, path in URL_OUTPUTS.items():
        url = values.get(output)
        if not isinstance(url, str) or not url.startswith("https://"):
            raise ManifestError(f"terraform output {output!r} must be an https URL, got {url!r}")
        node = filled
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = url
    prompts = values.get(PROMPTS_OUTPUT)
    if prompts is not None:  # outputs saved before the assistant pane existed keep the template's
        if not isinstance(prompts, list) or not all(_is_prompt(p) for p in prompts) or len(prompts) > MAX_PROMPTS:
            raise ManifestError(f"terraform output {PROMPTS_OUTPUT!r} must be a list of at most {MAX_PROMPTS} "
                                f"{{title, message}} objects, got {prompts!r}")  # fmt: skip
        filled["features"][f"{surface}_view"]["suggested_prompts"] = [
            {"title": p["title"], "message": p["message"]} for p in prompts
        ]
    return filled


def _to_assistant_view(manifest: dict[str, Any]) -> None:
    """``agent_view`` as the assistant pane: ``assistant_view`` with ``assistant_description``, and its events."""
    view = manifest["features"].pop("agent_view")
    manifest["features"]["assistant_view"] = {
        "assistant_description": view["agent_description"], "suggested_prompts": view.get("suggested_prompts", []),
    }  # fmt: skip
    events = manifest["settings"]["event_subscriptions"]
    events["bot_events"] = [ASSISTANT_EVENTS.get(event, event) for event in events["bot_events"]]


def _is_prompt(prompt: Any) -> bool:
    return isinstance(prompt, dict) and all(isinstance(prompt.get(key), str) for key in ("title", "message"))


def render(outputs: dict[str, Any], template: Path = TEMPLATE, *, surface: str = "agent") -> str:
    manifest = yaml.safe_load(template.read_text())
    return yaml.safe_dump(fill(manifest, outputs, surface=surface), sort_keys=False, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the Slack app manifest with the deployed URLs.")
    parser.add_argument("--outputs", type=Path, required=True, help="`terraform output -json` saved to a file")
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("--out", type=Path, help="where to write the manifest (default: stdout)")
    parser.add_argument("--surface", choices=SURFACES, default="agent",
                        help="agent: Slack's agent messaging experience (agent_view, the default); assistant: the "
                             "older assistant pane (assistant_view)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        text = render(json.loads(args.outputs.read_text()), args.template, surface=args.surface)
    except ManifestError as exc:
        print(f"error: {exc} (has `terraform apply` run?)", file=sys.stderr)
        return 1
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}: paste it into https://api.slack.com/apps -> Create New App -> From an app manifest")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

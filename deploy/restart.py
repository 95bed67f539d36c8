"""Roll a new revision of every function so that running instances re-read their secrets.

The functions read each secret's ``latest`` version when an instance starts.
After ``gcloud secrets versions add`` (first setup or a rotation), this starts a
new revision of each function's Cloud Run service by touching a revision label,
so no instance keeps serving with the old value. Function names, region and
project come from ``terraform output -json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from deploy.manifest import output_values

ROOT = Path(__file__).resolve().parent.parent


def commands(outputs: dict[str, object], stamp: int) -> list[list[str]]:
    values = output_values(outputs)
    names = values["function_names"]
    assert isinstance(names, dict), "terraform output function_names must be a map"
    return [
        [
            "gcloud",
            "run",
            "services",
            "update",
            str(name),
            f"--region={values['region']}",
            f"--project={values['project_id']}",
            f"--update-labels=secrets-reloaded-at={stamp}",
            "--quiet",
        ]
        for name in sorted(names.values())
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--outputs", type=Path, help="saved `terraform output -json` (default: ask terraform)")
    args = parser.parse_args(argv)
    if args.outputs is not None:
        text = args.outputs.read_text()
    else:
        text = subprocess.run(
            ["terraform", f"-chdir={ROOT / 'terraform'}", "output", "-json"], check=True, capture_output=True, text=True
        ).stdout
    for command in commands(json.loads(text), int(time.time())):
        print("+", " ".join(command))
        subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

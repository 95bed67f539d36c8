"""Figure 2: cold start of slack_events under functions-framework, next to a bare hello-world function.

How it is measured and read: ``bench/sections/coldstart.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.figures import Section, at_most, info, median, paired_ratio, table, text
from bench.harness import BENCH_DIR, Bench, function_argv, phase, take_turns
from infra import slack_payloads as events
from infra.procs import Proc, free_port
from infra.stack import ROOT

RUNS = 5
IMPORT_RUNS = 3  # the import stages are context (no target); whether google-genai loads is the same every run
BOLT_LIMIT = 1.0  # ours over Bolt: the peer doing the same work; a bare function is reported, without a target

STAGES = {  # the ingress path's stages in a fresh interpreter (``bench/ingress_path.py``)
    "framework_ms": "import functions-framework (and Flask)",
    "main_ms": "load `functions/main.py`",
    "ingress_imports_ms": "`from shared.handlers import slack_events` (what the handler imports on its first call)",
    "first_request_ms": "the first signed mention after that (builds the clients, one commit, one task)",
    "first_request_imports_ms": "… of which imports made while building the clients",
}
KINDS = {
    "hello": (ROOT / "bench" / "hello.py", "hello"),
    "ours": (ROOT / "functions" / "main.py", "slack_events"),
    "bolt": (ROOT / "bench" / "bolt_app.py", "slack_events"),
}


@dataclass
class Start:
    listening_ms: list[float] = field(default_factory=list)
    first_200_ms: list[float] = field(default_factory=list)


def _request(kind: str) -> tuple[str, bytes | None, dict[str, str]]:
    if kind == "hello":
        return "GET", None, {}
    stamp = time.time()
    body, headers = events.signed(
        events.mention(channel="CCOLD", ts=f"{stamp:.6f}", text="cold start"), event_id=f"EvCold{time.time_ns()}"
    )
    return "POST", body, headers


def cold_start(bench: Bench, kind: str) -> tuple[float, float]:
    """(ms to a listening socket, ms to the first 200) for one fresh process of ``kind``."""
    import http.client

    source, target = KINDS[kind]
    port = free_port()
    method, body, headers = _request(kind)
    proc = Proc(
        name=f"cold-{kind}",
        argv=function_argv(source, target, port),
        log_path=BENCH_DIR / "logs" / f"cold-{kind}.log",
        env=bench.function_env(),
        cwd=ROOT,
    )
    start = time.perf_counter()
    proc.start()
    try:
        while True:
            if not proc.alive():
                raise RuntimeError(f"{kind} exited while starting:\n{proc.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.005)
        listening = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(method, "/", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        answered = time.perf_counter()
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"{kind} answered {response.status} to its first request:\n{proc.log_tail()}")
        return (listening - start) * 1000, (answered - start) * 1000
    finally:
        proc.stop()


def import_path(bench: Bench) -> dict[str, Any]:
    """One cold ingress in a fresh interpreter under -X importtime: its stage times and import costs."""
    from bench.ingress_path import MARKER

    body, headers = events.signed(
        events.mention(channel="CCOLDPATH", ts=f"{time.time():.6f}", text="cold"),
        event_id=f"EvPath{time.time_ns()}",
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bench.ingress_path"],
        input=json.dumps({"body": body.decode(), "headers": headers}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=bench.function_env(),
        timeout=120,
        check=False,
        start_new_session=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"bench.ingress_path failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if result["status"] != 200:
        raise RuntimeError(f"the cold ingress answered {result['status']}")
    _before, ingress_imports, first_request = done.stderr.split(MARKER + "\n")
    result["packages"] = import_costs(done.stderr)
    result["ingress_tree"] = import_tree(ingress_imports)
    result["first_request_imports_ms"] = sum(ms for _depth, ms, _name in import_tree(first_request, 0, 0))
    return result


def _entries(importtime: str) -> list[tuple[int, float, float, str]]:
    """(depth, self ms, cumulative ms, module) per line of ``-X importtime`` output, in its (post-)order."""
    entries = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        try:
            own, cumulative, name = line.removeprefix("import time:").split("|")
            depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
            entries.append((depth, int(own) / 1000, int(cumulative) / 1000, name.strip()))
        except ValueError:
            continue
    return entries


def import_costs(importtime: str) -> dict[str, float]:
    """Self import time (ms) summed by package."""
    costs: dict[str, float] = defaultdict(float)
    for _depth, own, _cumulative, name in _entries(importtime):
        costs[package_of(name)] += own
    return dict(costs)


def import_tree(importtime: str, min_ms: float = 20.0, max_depth: int = 9) -> list[tuple[int, float, str]]:
    """The imports that cost at least ``min_ms`` (cumulative), parents before children, to ``max_depth``."""
    pending: dict[int, list[tuple[int, float, str, list[Any]]]] = defaultdict(list)
    roots: list[tuple[int, float, str, list[Any]]] = []
    for depth, _own, cumulative, name in _entries(importtime):
        node = (depth, cumulative, name, pending.pop(depth + 1, []))
        (pending[depth] if depth else roots).append(node)
    flat: list[tuple[int, float, str]] = []

    def walk(nodes: list[tuple[int, float, str, list[Any]]]) -> None:
        for depth, cumulative, name, children in nodes:
            if cumulative >= min_ms and depth <= max_depth:
                flat.append((depth, cumulative, name))
                walk(children)

    walk(roots)
    return flat


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "google" and len(parts) > 2 and parts[1] in {"cloud", "api_core"}:
        return ".".join(parts[:3]) if parts[1] == "cloud" else "google.api_core"
    if parts[0] == "google" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def run(bench: Bench) -> Section:
    section = Section("2. Cold start")
    # Each run starts one of each kind back to back, in rotating order: a run is a round of the paired bootstrap.
    taken = take_turns({kind: functools.partial(cold_start, bench, kind) for kind in KINDS}, RUNS)
    starts = {kind: Start([listening for listening, _ in found], [first for _, first in found])
              for kind, found in taken.items()}  # fmt: skip
    hello, ours, bolt = (median(starts[k].first_200_ms) for k in ("hello", "ours", "bolt"))
    ratio = paired_ratio("cold_start_ours_over_bolt", starts["ours"].first_200_ms, starts["bolt"].first_200_ms, 50,
                         BOLT_LIMIT)  # fmt: skip
    judged, *bounds = ratio.figures()
    section.add(
        info("cold_start_hello_first_200", hello, "ms"),
        info("cold_start_ours_first_200", ours, "ms"),
        info("cold_start_bolt_first_200", bolt, "ms"),
        info("cold_start_ours_over_hello", ours / hello, "ratio"),
        judged,
        *bounds,
    )
    with phase("imports"):
        paths = [import_path(bench) for _ in range(IMPORT_RUNS)]
    stage = {key: median([float(p[key]) for p in paths]) for key in STAGES}
    genai = any(bool(p["genai_loaded"]) for p in paths)
    section.add(
        info("ingress_import_functions_framework", stage["framework_ms"], "ms"),
        info("ingress_import_functions_main", stage["main_ms"], "ms"),
        info("ingress_import_shared_ingress", stage["ingress_imports_ms"], "ms"),
        info("ingress_first_request_after_imports", stage["first_request_ms"], "ms"),
        at_most("ingress_path_imports_google_genai", float(genai), "bool", 0),
    )
    typical = sorted(paths, key=lambda p: float(p["ingress_imports_ms"]))[len(paths) // 2]
    packages: dict[str, list[float]] = defaultdict(list)
    for p in paths:
        for name, ms in p["packages"].items():
            packages[name].append(ms)
    heaviest = sorted(((median(v), k) for k, v in packages.items()), reverse=True)[:12]
    section.say(
        *text("coldstart"),
        table(
            ["function", "ms to listening (median)", "ms to first 200 (median)", f"first 200, each of {RUNS} runs"],
            [
                (kind, median(s.listening_ms), median(s.first_200_ms), ", ".join(f"{v:.0f}" for v in s.first_200_ms))
                for kind, s in starts.items()
            ],
        ),
        f"The ingress path in a fresh interpreter (median of {IMPORT_RUNS} runs, in ms):",
        table(["stage", "ms"], [(label, stage[key]) for key, label in STAGES.items()]),
        f"google-genai loaded on this path: {'**yes**' if genai else 'no'} "
        f"({median([float(p['modules_loaded_by_first_request']) for p in paths]):.0f} modules are loaded by the first "
        "request, none of them `google.genai`). What `from shared.handlers import slack_events` imports, by "
        "cumulative import time (`-X importtime`, the median run, imports of 20 ms or more):",
        "```\n"
        + "\n".join(f"{ms:7.1f} ms  {'  ' * depth}{name}" for depth, ms, name in typical["ingress_tree"])
        + "\n```",
        "Import time by package over the whole path (self time summed over each package's modules, median):",
        table(["package", "import ms"], [(f"`{name}`", ms) for ms, name in heaviest]),
    )
    tree = {name: ms for _depth, ms, name in typical["ingress_tree"]}
    per_run = [o / b for o, b in zip(starts["ours"].first_200_ms, starts["bolt"].first_200_ms, strict=True)]
    section.say(
        f"Ours over Bolt: {ours / bolt:.3f} (the medians' ratio; 95% interval {ratio.low:.3f} to {ratio.high:.3f}). "
        f"Run by run (the two started back to back) the ratio was {', '.join(f'{r:.2f}' for r in per_run)}."
        + (" Above 1, but the interval reaches 1: this run cannot tell it from a ratio of 1."
           if judged.met and judged.value > BOLT_LIMIT else ""),
        *text("coldstart_read", over_hello=ours / hello, hello=hello, stage=stage,
              firestore=tree.get("google.cloud.firestore", 0.0), tasks=tree.get("google.cloud.tasks_v2", 0.0),
              slack=tree.get("slack_sdk.signature", tree.get("slack_sdk", 0.0))),
    )  # fmt: skip
    if not judged.met:
        section.say(*text("coldstart_missed", ratio=ratio, target=judged.target, runs=RUNS, later=ours - bolt,
                          below_one=sum(1 for r in per_run if r <= BOLT_LIMIT), stage=stage))  # fmt: skip
    return section

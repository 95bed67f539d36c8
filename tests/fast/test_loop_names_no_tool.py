"""The loop names no tool (issue 23): the runner, the turn's dispatcher and the pause and resume steps hold no
tool's name, as a string or through a constant, and no tool's class; what a call does to the loop (it waits, it
starts children, it resumes with an MCP server's input) comes from its outcome or its tool's protocol
(``starts_children``, ``ResumesWithInput``). Reads the source only (pure: no stack)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.agent.tools import builtin
from shared.agent.tools.function import tools_in

AGENT = Path(__file__).resolve().parents[2] / "shared" / "agent"
LOOP = ["runner.py", "tool_turn.py", "calls.py", "pausing.py", "resume.py"]
TOOLS = {"ask_operator", "delegate", "ask_parent", "answer_child"}
CONSTANTS = {"STARTS_CHILDREN", "McpTool", "FunctionTool"}  # a tool's name or class under another name


@pytest.mark.parametrize("module", LOOP)
def test_the_loop_names_no_tool(module: str) -> None:
    tree = ast.parse((AGENT / module).read_text())
    named = [
        node.value if isinstance(node, ast.Constant) else getattr(node, "attr", getattr(node, "id", ""))
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value in TOOLS)
        or (isinstance(node, ast.Attribute) and node.attr in CONSTANTS)
        or (isinstance(node, ast.Name) and node.id in CONSTANTS)
        or (isinstance(node, ast.alias) and node.name in CONSTANTS)
    ]
    assert named == [], f"{module} names a tool: {named}"


def test_only_delegate_starts_children() -> None:
    """The dispatcher refreshes the thread's tree status after a turn with a call that may start a child: the tool
    says so itself."""
    assert {t.name for t in tools_in(builtin) if t.starts_children} == {"delegate"}

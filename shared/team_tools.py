"""Your team's own tools. Add a typed, documented function here with ``@tool`` and the agent can use it.

Example (the docstring is what the model reads to decide when to call it):

    from shared.tools import tool

    @tool(outward=True)  # outward: the requester expects a report after it runs
    def create_ticket(title: str, body: str) -> dict[str, str]:
        \"\"\"Open a ticket in the team's tracker.

        Args:
            title: A one-line summary.
            body: What needs doing, in Markdown.
        \"\"\"
        ...
        return {"ticket": "ENG-123"}

Use ``shared.tools.context()`` inside a tool for the session it runs for, and
raise ``shared.tools.ToolError`` for a refusal the model should hear about.
"""

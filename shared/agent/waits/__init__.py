"""The wait model: what a paused turn's calls wait on and what each gets when it resumes (``plan``, pure, and
``resuming``), and each kind of wait's agent side on one protocol (``base``), one module per ``WaitKind``
(``question``, ``approval``, ``child``, ``parent_answer``, ``mcp_input``), held by kind in ``kinds``.

May import the agent's tools and opening, ``shared.asks``, ``shared.state`` and the core modules (config, errors,
limits, logs); never the runner or the turn dispatcher.
"""

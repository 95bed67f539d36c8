"""The agent: the bounded loop (``runner``), composed of parts with one job each: the run's state and its commits
(``run_state``), where a run starts (``starting``), the budgets' checks (``allowance``), a turn's tool calls
(``tool_turn``, one call in ``calls``), a turn's pauses (``pausing``), how a paused turn resumes (``resume``,
``waits/``), how a run ends (``ending``); its budget, transcript, prompts, opening turn, the model client
(``model``), the silent-exit gate and the follow-ups, and the tools (``shared.agent.tools``).

May import ``shared.asks``, ``shared.queue``, ``shared.slack``, ``shared.state`` and the core modules; never
``shared.usecases`` or ``shared.handlers``. Only ``shared.usecases.worker`` and the sweep reach it: the Slack
ingress never does (it imports google-genai).
"""

"""The agent: the bounded loop (``runner``), its budget, transcript, prompts, the model client, the silent-exit
gate and the follow-ups, the tools (``shared.agent.tools``), and the use cases that start, run and sweep sessions.

May import ``shared.asks``, ``shared.slack``, ``shared.state`` and the core modules. Only modules on the
``agent_session`` path import google-genai; ``intake`` (used by the Slack ingress) never does.
"""

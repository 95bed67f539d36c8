"""The use cases, one module each, called by the handlers: what a person's Slack message does (``intake``), what
opening the app's assistant pane does (``assistant_pane``), what a person's Stop does (``stop``), what one delivery
of a session's task does (``worker``: claim, run, answer Cloud Tasks) and the daily sweep (``sweep``).

May import ``shared.agent``, ``shared.asks``, ``shared.queue``, ``shared.slack``, ``shared.state`` and the core
modules; never ``shared.handlers``. Only ``worker`` reaches the agent's loop (and google-genai); what the Slack
ingress calls (``intake``, ``assistant_pane``, ``stop``) never imports ``shared.agent``.
"""

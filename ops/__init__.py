"""Operator tools for the deployed product, run from a person's terminal with their own credentials: the
read-only console (``console.py``, ``make console``; its rows, one per conversation, ``conversations.py``; the
workspace's Console tab serves the same view), the page both serve (``web/``, by ``page.py``), the admin commands
(``admin.py``: ``make admin``, ``make sweep``, ``make stop``, ``make usage``), people's names for what they print
(``names.py``, ``users.info`` cached), and the local stack's record a tool reads when pointed at one
(``local_stack.py``).

Built on ``shared/`` (its state, Slack client and use cases); ``shared/`` never imports it (import-linter's
layers in pyproject.toml). The local stack (``infra/``) uses it, never the other way round (import-linter's
"never import infra/" contract): the fake Slack serves this package's page, and ``infra/stack.py`` writes the
record ``local_stack.py`` reads.
"""

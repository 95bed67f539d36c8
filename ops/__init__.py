"""Operator tools for the deployed product, run from a person's terminal with their own credentials: the
read-only console (``console.py``, ``make console``; the workspace's Console tab serves the same view), the
admin commands (``admin.py``: ``make admin``, ``make sweep``, ``make stop``, ``make usage``) and people's names
for what they print (``names.py``, ``users.info`` cached).

Built on ``shared/`` (its state, Slack client and use cases); ``shared/`` never imports it (import-linter's
layers in pyproject.toml). The local stack (``infra/``) uses it, not the other way round, except where a tool
finds the local stack it was asked to act on (``admin.py``) or the console's page files (``console.py``).
"""

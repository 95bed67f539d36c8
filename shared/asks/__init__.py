"""Anything a session waits on: questions to the operator (ask, cancel older ones, remind, abandon) and
their answers (who may answer, option matching, the resume-or-note rule), approvals (their cards, approvers and
edits; cards and questions routed to the operator channel), delegated children and their tree's status message,
the lifecycle questions and approvals share, stopping a session's tree, and a press of 👍/👎.

May import ``shared.queue``, ``shared.slack``, ``shared.state`` and the core modules; never ``shared.agent`` or
``shared.usecases`` (the agent asks, the asks never run the agent).
"""
